package peer

import (
	"cmp"
	"slices"

	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// The piece order of an artifact, which its stripes deal out (piece i to
// stripe i mod k, wire.Stripe): its units as shardUnits lists them, shard
// by shard, each cut into pieces of blake3.PieceSize. An empty unit has no
// piece. Both ends of a striped session compute it from the manifest.

// pieceOrder is an artifact's piece order, each shard's non-empty units by
// offset.
type pieceOrder struct {
	shards [][]orderedUnit
}

// orderedUnit is a unit's range in its shard and its first piece's index.
type orderedUnit struct {
	off, n, first int64
}

// newPieceOrder is the piece order of m's artifact.
func newPieceOrder(m *wire.WeightManifest) *pieceOrder {
	o := &pieceOrder{shards: make([][]orderedUnit, len(m.Shards))}
	var next int64
	for i, s := range m.Shards {
		for _, u := range shardUnits(i, s, nil) {
			if u.n > 0 {
				o.shards[i] = append(o.shards[i], orderedUnit{off: u.off, n: u.n, first: next})
				next += blake3.Pieces(u.n)
			}
		}
		slices.SortFunc(o.shards[i], func(a, b orderedUnit) int { return cmp.Compare(a.off, b.off) })
	}
	return o
}

// unitAt is the unit of shard i that holds offset off.
func (o *pieceOrder) unitAt(i int, off int64) (orderedUnit, bool) {
	if i < 0 || i >= len(o.shards) {
		return orderedUnit{}, false
	}
	us := o.shards[i]
	k, found := slices.BinarySearchFunc(us, off, func(u orderedUnit, off int64) int { return cmp.Compare(u.off, off) })
	if !found {
		k--
	}
	if k < 0 || off >= us[k].off+us[k].n {
		return orderedUnit{}, false
	}
	return us[k], true
}

// piece is the index of the piece [off, off+n) of shard i lies in; false
// when the range is empty or not within one piece.
func (o *pieceOrder) piece(i int, off, n int64) (int64, bool) {
	u, ok := o.unitAt(i, off)
	if !ok || n <= 0 {
		return 0, false
	}
	p := (off - u.off) / blake3.PieceSize
	end := u.off + min(u.n, (p+1)*blake3.PieceSize)
	return u.first + p, off+n <= end
}

// first is the index of the first piece of the unit of shard i at off.
func (o *pieceOrder) first(i int, off int64) int64 {
	u, _ := o.unitAt(i, off)
	return u.first
}
