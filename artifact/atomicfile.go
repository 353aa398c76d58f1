package artifact

import (
	"fmt"
	"os"
	"path/filepath"
)

// Durability of WriteFileAtomic.
const (
	// Durable fsyncs the new file before the rename and its directory
	// after: once WriteFileAtomic returns, the new content survives a crash.
	Durable = true
	// Volatile skips both: a crash may leave the old content, never a part.
	Volatile = false
)

// WriteFileAtomic replaces the file at p with data: written to a temp file
// beside it (unique to the call), then renamed over p, so a reader sees the
// old content or the new, never a part of it. A failure removes the temp file.
func WriteFileAtomic(p string, data []byte, perm os.FileMode, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(p), err)
	}
	return nil
}
