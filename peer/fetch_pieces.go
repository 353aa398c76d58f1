package peer

import (
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// Pieces: over tcp, a fetch that serves what it fetches, or fetches from a
// builder, takes every unit longer than a piece (blake3.PieceSize) in
// pieces. It first asks the source for the unit's pieces' chaining values
// (a range request for pieces, on the rail, before the pieces' ranges),
// checks that they merge into the unit's BLAKE3 and records them
// (artifact.Seeder.Pieces); then each piece is verified against its
// chaining value as it lands, written and recorded verified on its own.
// A chain of builders thus forwards a tensor a piece, not a tensor, after
// its source; no byte is recorded verified before its piece matched. The
// rma plane keeps whole units.

// piecesFrom says whether a tcp session takes long units in pieces: from
// a peer that answers for pieces of this size, when this node serves what
// it fetches, the peer builds (its pieces then come as it verifies them),
// or the session is of one stripe (a set of pieces). Otherwise a unit is
// one hash and no round trip more.
func (f *fetcher) piecesFrom(cs *clientSession) bool {
	return cs.manifest.PieceSize == blake3.PieceSize && (f.seed != nil || cs.manifest.Building || cs.stripe.Count > 0)
}

// ask is one request of a tcp rail: a unit's bytes or, with pieces, the
// chaining values of the unit's pieces, which the rail asks for next.
type ask struct {
	u      *unit
	pieces []*unit
}

// asks are a rail's requests for units: with pieces, a unit longer than a
// piece and not in pieces yet is asked for its pieces' chaining values,
// then for each piece of stripe (every piece, for the zero Stripe).
func asks(units []*unit, pieces bool, stripe wire.Stripe) []ask {
	out := make([]ask, 0, len(units))
	for _, u := range units {
		if !pieces || u.parent != nil || u.n <= blake3.PieceSize {
			out = append(out, ask{u: u})
			continue
		}
		ps := make([]*unit, blake3.Pieces(u.n))
		for i := range ps {
			at := int64(i) * blake3.PieceSize
			ps[i] = &unit{shard: u.shard, off: u.off + at, n: min(u.n-at, blake3.PieceSize), dst: u.dst, dstOff: u.dstOff + at,
				part: -1, name: u.name, parent: u, piece: int64(i)}
		}
		out = append(out, ask{u: u, pieces: ps})
		for _, p := range ps {
			if stripe.Has(u.first + p.piece) {
				out = append(out, ask{u: p})
			}
		}
	}
	return out
}

// split takes the chaining values of u's pieces from the peer at addr: a
// list that does not merge into u's BLAKE3 is the peer's fault; one that
// does is recorded, when this node serves what it fetches, and ps, with
// their chaining values, become u's pieces, unless another session of a
// striped fetch split u first (its pieces stay u's).
func (f *fetcher) split(addr string, u *unit, ps []*unit, cvs [][32]byte) error {
	if len(cvs) != len(ps) || blake3.RootFromCVs(cvs) != u.blake3 {
		return &Error{Addr: addr, Err: fmt.Errorf("fetched the pieces of %s: %d chaining values for %d pieces, not merging into its BLAKE3 %s: %w",
			u.what(), len(cvs), len(ps), artifact.ShortHex(artifact.SumHex(u.blake3)), errdefs.ErrDataLoss)}
	}
	for i, p := range ps {
		p.blake3 = cvs[i]
	}
	return f.units.split(u, ps, func() error {
		if f.seed != nil && u.dst.fw != nil {
			return f.seed.Pieces(u.dst.path, u.dstOff, u.n, cvs)
		}
		return nil
	})
}
