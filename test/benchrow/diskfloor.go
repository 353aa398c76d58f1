package benchrow

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DiskFloor is the disk's floor for size bytes: the seconds it takes to
// write them (not zeros, which no filesystem may skip) spread over files new
// files under dir, each synced. The files are removed.
func DiskFloor(dir string, size int64, files int) (float64, error) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	start := time.Now()
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("disk-floor-%d", i))
		err := writeSynced(p, buf, size/int64(files))
		os.Remove(p)
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds(), nil
}

// writeSynced writes n bytes of buf, repeated, to a new file at p and syncs it.
func writeSynced(p string, buf []byte, n int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
