package harness

import (
	"io/fs"
	"os"
	"path/filepath"
)

// EachFile calls fn with each regular file under dir, open for reading, and
// stops at the first error.
func EachFile(dir string, fn func(f *os.File) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return fn(f)
	})
}
