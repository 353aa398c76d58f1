package artifact

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxRecordsBytes bounds one artifact's trust records, encoded (package
// trust's Record), however they come: read from the store, sent by a
// weight peer.
const MaxRecordsBytes = 16 << 20

// ErrFileTooLarge is a file over the bound its reader set; nothing past
// the bound was read.
var ErrFileTooLarge = errors.New("file is larger than its bound")

// ReadFileAtMost reads the file at p, which must hold at most max bytes:
// the counterpart of WriteFileAtomic for the small records and files the
// program reads back (pins, fingerprint records, prefetch files), where a
// file grown past any size it was written with is refused before it is
// read whole. Errors from opening p (fs.ErrNotExist, ...) are returned as
// they are.
func ReadFileAtMost(p string, max int) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > max {
		return nil, fmt.Errorf("%s: over %d bytes: %w", p, max, ErrFileTooLarge)
	}
	return raw, nil
}
