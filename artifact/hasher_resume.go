package artifact

import (
	"bytes"

	"encoding/binary"

	"fmt"
	"io"
	"sort"

	"github.com/containerd/errdefs"
)

// MaxStateLen bounds a hash state (State) as a checkpoint records it.
const MaxStateLen = 256

// Resumable says whether a file hashed under b can be continued from a
// kept prefix (State, ResumeAt): a safetensors file bound by its tree
// written in order, whose header and tensors the record names, so that
// every byte of the prefix is checked again from the disk against the
// record.
func Resumable(b Binding) bool {
	return b.By == BindTreeStream && IsSafetensors(b.Want.Path)
}

// treeState is State's state: a file bound by its tree carries no hash
// over its prefix, which ResumeAt reads back whole.
var treeState = []byte("blake3 tree")

// NextBoundary is where the part the next byte written belongs to ends
// (the header region or a tensor; the file's end after the last tensor),
// for a Resumable file whose header is parsed; 0 otherwise. A writer that
// keeps states splits its writes there (State).
func (h *FileHasher) NextBoundary() int64 {
	if !Resumable(h.b) || h.header == nil {
		return 0
	}
	ds := h.header.DataStart()
	ts := h.header.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ds+ts[i].End > h.pos })
	if i == len(ts) {
		return h.entry.Size
	}
	return ds + ts[i].End
}

// atBoundary says whether the bytes written end where a part does.
func (h *FileHasher) atBoundary() bool {
	if h.header == nil {
		return false
	}
	ds := h.header.DataStart()
	ts := h.header.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ds+ts[i].End >= h.pos })
	return h.pos == ds || (i < len(ts) && ds+ts[i].End == h.pos)
}

// State is how far the hasher is (the bytes [0, off) were written, ending
// where a part ends: NextBoundary) and its state there: what ResumeAt
// needs to continue the file from off. Call it between two Writes, from
// the goroutine that writes; ok is false for a file that is not Resumable
// or bytes that do not end at a boundary.
func (h *FileHasher) State() (off int64, state []byte, ok bool) {
	if h.err != nil || !Resumable(h.b) || !h.atBoundary() {
		return 0, nil, false
	}
	return h.pos, treeState, true
}

// ResumeAt continues a new hasher of a Resumable file at off, where a part
// ends, with the state State gave there: the file's prefix is read back
// from r and checked again as it is read (the header region against the
// record's header BLAKE3 and table, every tensor against the record's
// BLAKE3), so no byte of the prefix is taken on trust. Call it before any
// Write. A prefix that fails its check, a state that is not State's, or
// an off that is no boundary, is an error; the hasher is then unusable.
func (h *FileHasher) ResumeAt(r io.ReaderAt, off int64, state []byte) error {
	if h.pos != 0 || h.err != nil {
		return fmt.Errorf("hash %s: resumed after a write: %w", h.entry.Path, errdefs.ErrFailedPrecondition)
	}
	if !Resumable(h.b) {
		return fmt.Errorf("hash %s: not resumable: %w", h.entry.Path, errdefs.ErrNotImplemented)
	}
	if off <= 0 || off > h.entry.Size || len(state) > MaxStateLen {
		return fmt.Errorf("hash %s: resume at %d of %d bytes (state %d bytes): %w", h.entry.Path, off, h.entry.Size, len(state), errdefs.ErrOutOfRange)
	}
	if !bytes.Equal(state, treeState) {
		return fmt.Errorf("hash %s: the state of another binding (%d bytes): %w", h.entry.Path, len(state), errdefs.ErrDataLoss)
	}
	buf := make([]byte, min(off, 4<<20))
	for h.pos < off {
		n := min(int64(len(buf)), off-h.pos)
		if h.header == nil {
			// The length prefix, then the header, never read past.
			n = min(n, 8-int64(len(h.prefix)))
			if len(h.prefix) >= 8 {
				// Untrusted: compared as unsigned before it is converted;
				// a length out of bounds fails in bufferHeader.
				n = 1
				if hl := binary.LittleEndian.Uint64(h.prefix[:8]); hl <= MaxHeaderLen {
					n = max(min(int64(len(buf)), off-h.pos, 8+int64(hl)-h.pos), 1)
				}
			}
		}
		if _, err := r.ReadAt(buf[:n], h.pos); err != nil {
			h.err = fmt.Errorf("hash %s: read the kept prefix: %w", h.entry.Path, err)
			return h.err
		}
		if err := h.hashParts(buf[:n]); err != nil {
			h.err = err
			return err
		}
	}
	if !h.atBoundary() {
		h.err = fmt.Errorf("hash %s: resume at %d, where no part ends: %w", h.entry.Path, off, errdefs.ErrDataLoss)
		return h.err
	}
	return nil
}
