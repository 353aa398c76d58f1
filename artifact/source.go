package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/containerd/errdefs"
)

// Stamp is what says a source file did not change: its device and inode,
// size, and modification and change times in nanoseconds, as stat reports
// them. A file with the same stamp before and after a read was not changed
// meanwhile, as far as the filesystem can tell.
type Stamp struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
}

// StampOf returns the stamp of a stat result.
func StampOf(fi os.FileInfo) (Stamp, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stamp{}, fmt.Errorf("stat %s: no inode information: %w", fi.Name(), errdefs.ErrNotImplemented)
	}
	return Stamp{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano()}, nil
}

// Source is a source file open for reading, stamped when it was opened.
type Source struct {
	*os.File
	Path  string // as the caller names it (a path relative to the checkpoint)
	Stamp Stamp
}

// OpenSource opens the file at abs, named path in errors, and stamps it.
func OpenSource(abs, path string) (*Source, error) {
	f, err := os.Open(abs)
	if err != nil {
		return nil, err
	}
	s := &Source{File: f, Path: path}
	if s.Stamp, err = s.stamp(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *Source) stamp() (Stamp, error) {
	fi, err := s.File.Stat()
	if err != nil {
		return Stamp{}, err
	}
	return StampOf(fi)
}

// Unchanged fails with a *SourceMismatchError if the file's stamp is no
// longer the one taken when it was opened.
func (s *Source) Unchanged() error {
	now, err := s.stamp()
	if err != nil {
		return err
	}
	if now != s.Stamp {
		return &SourceMismatchError{Path: s.Path, Want: "unchanged", Got: "modified while it was read"}
	}
	return nil
}

// HashSource returns the sha256 (hex) of a source file read once, in
// order, and the stamp it had; a file that changes while it is read is a
// *SourceMismatchError. buf is the read buffer.
func HashSource(ctx context.Context, abs, path string, buf []byte) (string, Stamp, error) {
	if err := ctx.Err(); err != nil {
		return "", Stamp{}, err
	}
	s, err := OpenSource(abs, path)
	if err != nil {
		return "", Stamp{}, err
	}
	defer s.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, s.File, buf)
	if err != nil {
		return "", s.Stamp, fmt.Errorf("hash %s: %w", path, err)
	}
	if err := s.Unchanged(); err != nil {
		return "", s.Stamp, err
	}
	if n != s.Stamp.Size {
		return "", s.Stamp, &SourceMismatchError{Path: path, Want: fmt.Sprintf("%d bytes", s.Stamp.Size), Got: fmt.Sprintf("%d bytes", n)}
	}
	return hex.EncodeToString(h.Sum(nil)), s.Stamp, nil
}
