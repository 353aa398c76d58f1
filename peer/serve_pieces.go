package peer

import (
	"context"
	"io"
	"time"

	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// A fetch may ask for the pieces of a unit (fetch_pieces.go): the server
// answers with their chaining values, as the builder recorded them or
// computed from the verified bytes.

// pieceCVs are the chaining values of the pieces of [off, off+n) of shard
// i: as a building artifact's builder recorded them or, once the range is
// verified (waiting within timeout) or of a READY artifact, computed from
// its bytes.
func (sv *servable) pieceCVs(ctx context.Context, i int, off, n int64, timeout time.Duration) ([][32]byte, error) {
	if n == 0 || blake3.Pieces(n) > wire.MaxPieces {
		return nil, badInput("pieces of a range of %d bytes", n)
	}
	sh := sv.shards[i]
	f := sh.file
	if sv.building != nil {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cvs, err := sv.building.WaitPieces(wctx, sh.entry.Path, off, n)
		if err != nil || cvs != nil {
			return cvs, err
		}
		if f, err = sv.building.File(sh.entry.Path); err != nil {
			return nil, err
		}
	}
	return hashPieces(f, off, n)
}

// hashPieces reads [off, off+n) of r a piece at a time and hashes each.
func hashPieces(r io.ReaderAt, off, n int64) ([][32]byte, error) {
	buf := make([]byte, min(n, blake3.PieceSize))
	cvs := make([][32]byte, blake3.Pieces(n))
	for i := range cvs {
		at := int64(i) * blake3.PieceSize
		p := buf[:min(n-at, blake3.PieceSize)]
		if _, err := r.ReadAt(p, off+at); err != nil {
			return nil, err
		}
		h := blake3.NewPieceHasher(int64(i))
		h.Write(p)
		h.Sum(cvs[i][:0])
	}
	return cvs, nil
}
