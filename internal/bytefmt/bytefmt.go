// Package bytefmt writes and reads byte counts for people: one decimal and
// a binary unit (1.5 GiB) as every message and table of weightsnap shows
// them, and sizes with units (512MiB) as every flag and file takes them.
package bytefmt

import "fmt"

// IEC is n bytes in the largest binary unit that leaves at least 1 of it:
// "512 B", "1.0 KiB", "64.1 MiB".
func IEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
