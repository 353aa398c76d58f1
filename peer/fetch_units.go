package peer

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"golang.org/x/sync/errgroup"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// unit is one range verified on its own: the header region or one tensor
// of a safetensors shard, the whole of any other file, or a piece of one
// of those (fetch_pieces.go).
type unit struct {
	shard  int   // in the manifest
	off, n int64 // in the shard
	dst    *target
	dstOff int64
	part   int    // the part of a bound file it is (SetPartBLAKE3); -1 for a header or a piece
	name   string // tensor name; "" for a header or a whole file
	blake3 artifact.Sum
	done   bool  // verified; guarded by unitTable.mu
	first  int64 // of a striped fetch, its first piece's index in the artifact's piece order (stripe_order.go)

	// A piece has a parent, its index among the parent's pieces, and its
	// chaining value as blake3. A unit taken in pieces has them once their
	// chaining values matched its BLAKE3 (guarded by unitTable.mu), and
	// left counts those not verified yet.
	parent *unit
	piece  int64
	pieces []*unit
	left   atomic.Int64
}

// shardUnits are a whole shard's units, written at the same offsets.
func shardUnits(i int, s wire.WeightShard, t *target) []*unit {
	digest := func(h string) artifact.Sum {
		d, _ := artifact.ParseSum(h) // the manifest's validation checked every digest
		return d
	}
	if !artifact.IsSafetensors(s.Path) {
		return []*unit{{shard: i, n: s.Size, dst: t, blake3: digest(s.BLAKE3)}}
	}
	us := []*unit{{shard: i, n: s.DataStart, dst: t, part: -1, blake3: digest(s.HeaderBLAKE3)}}
	for k, x := range s.Tensors {
		us = append(us, &unit{shard: i, off: x.Offset, n: x.Length, dst: t, dstOff: x.Offset, part: k, name: x.Name, blake3: digest(x.BLAKE3)})
	}
	return us
}

// unitTable is a fetch's units and the files they land in: which units
// are verified, which remain, and, of a unit taken in pieces, its pieces.
type unitTable struct {
	mu      sync.Mutex
	units   []*unit
	targets []*target
	// claims, set for a striped fetch, are the rails that asked for each
	// unit (stripe_endgame.go).
	claims map[unitKey]*railClaim
}

// addTarget records a file the fetch writes.
func (ut *unitTable) addTarget(t *target) { ut.targets = append(ut.targets, t) }

// add records units; before any session, so unlocked.
func (ut *unitTable) add(us []*unit) { ut.units = append(ut.units, us...) }

// bytes is the payload the units hold.
func (ut *unitTable) bytes() int64 {
	var n int64
	for _, u := range ut.units {
		n += u.n
	}
	return n
}

// remaining are the units not verified yet, in order: of a unit taken in
// pieces, its pieces not verified yet.
func (ut *unitTable) remaining() []*unit {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	var out []*unit
	for _, u := range ut.units {
		switch {
		case u.done:
		case u.pieces == nil:
			out = append(out, u)
		default:
			for _, p := range u.pieces {
				if !p.done {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// markDone marks a unit verified; false if it was already.
func (ut *unitTable) markDone(u *unit) bool {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	if u.done {
		return false
	}
	u.done = true
	return true
}

// split gives u its pieces, whose chaining values matched its BLAKE3,
// once record (the pieces' record for the store) succeeded; u keeps the
// pieces it has, from another session of a striped fetch.
func (ut *unitTable) split(u *unit, ps []*unit, record func() error) error {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	if u.pieces != nil {
		return nil
	}
	if err := record(); err != nil {
		return err
	}
	u.left.Store(int64(len(ps)))
	u.pieces = ps
	return nil
}

// piece is the piece of u's parent that the table keeps for u's place. Two
// sessions of a striped fetch may each split a unit; the first one's
// pieces are the unit's, and the other's stand for them.
func (ut *unitTable) piece(u *unit) *unit {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	if ps := u.parent.pieces; ps != nil {
		return ps[u.piece]
	}
	return u
}

// addUnits records a target's units; empty ones are done at once.
func (f *fetcher) addUnits(t *target, us []*unit) error {
	t.pending.Store(int64(len(us)))
	f.units.add(us)
	if len(us) == 0 {
		f.closeTarget(t)
	}
	for _, u := range us {
		if u.n == 0 { // the manifest's validation checked its hash is the empty one
			if err := f.landed("", u, u.blake3); err != nil {
				return err
			}
		}
	}
	return nil
}

// what names a unit in messages.
func (u *unit) what() string {
	what := u.dst.path
	if u.name != "" {
		what += " tensor " + u.name
	}
	if u.parent != nil {
		what += fmt.Sprintf(" piece %d", u.piece)
	}
	return what
}

// landed records a unit whose bytes, from the peer at addr, hash to sum: a
// mismatch is the peer's fault; a match is reported to a bound file and the
// unit is done, and a piece's parent once its pieces all are. A target
// whose units are all done is closed in the background.
func (f *fetcher) landed(addr string, u *unit, sum artifact.Sum) error {
	if u.parent != nil {
		u = f.units.piece(u)
	}
	if sum != u.blake3 {
		got, want := "BLAKE3", "manifest says"
		if u.parent != nil {
			got, want = "chaining value", "its pieces' list says"
		}
		return &Error{Addr: addr, Err: fmt.Errorf("fetched %s: %s %s, %s %s: %w", u.what(), got,
			artifact.ShortHex(artifact.SumHex(sum)), want, artifact.ShortHex(artifact.SumHex(u.blake3)), errdefs.ErrDataLoss)}
	}
	if u.parent == nil {
		if err := f.setPart(u); err != nil {
			return err
		}
	}
	if !f.units.markDone(u) {
		return nil
	}
	if u.dst.fw != nil {
		if err := f.verified(u.dst.path, u.dstOff, u.n); err != nil {
			return err
		}
	}
	f.stats.verified(u.n)
	if t := u.parent; t != nil {
		if t.left.Add(-1) > 0 {
			return nil
		}
		// Every piece verified: so is the unit, whose BLAKE3 the pieces'
		// chaining values merged into.
		if err := f.setPart(t); err != nil {
			return err
		}
		f.units.markDone(t)
	}
	if u.dst.pending.Add(-1) == 0 {
		f.closeTarget(u.dst)
	}
	return nil
}

// setPart reports a verified unit's BLAKE3 to its bound file.
func (f *fetcher) setPart(u *unit) error {
	if u.dst.fw != nil && u.part >= 0 {
		return u.dst.fw.SetPartBLAKE3(u.part, u.blake3)
	}
	return nil
}

// verified tells the store a range of a bound file is written and verified,
// when this node serves what it fetches.
func (f *fetcher) verified(path string, off, n int64) error {
	if f.seed == nil || n == 0 {
		return nil
	}
	return f.seed.Verified(path, off, n)
}

// continueTarget records the units of a target the store kept from an
// interrupted fetch, and takes as verified each whose kept bytes hash to
// its BLAKE3 in the manifest (read back, several units at once); the
// others are fetched. A file every unit of which matched counts as reused
// whole, any other that kept some as continued.
func (f *fetcher) continueTarget(ctx context.Context, t *target, r io.ReaderAt, us []*unit) error {
	if err := f.addUnits(t, us); err != nil {
		return err
	}
	var kept, units atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, u := range us {
		if u.n == 0 {
			continue
		}
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			h := blake3.New()
			if _, err := io.Copy(h, io.NewSectionReader(r, u.dstOff, u.n)); err != nil {
				return nil // not read back: fetched again
			}
			var sum artifact.Sum
			h.Sum(sum[:0])
			if sum != u.blake3 {
				return nil
			}
			if err := f.keptUnit(u); err != nil {
				return err
			}
			kept.Add(u.n)
			units.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	switch n := kept.Load(); {
	case n == 0:
	case t.pending.Load() == 0:
		f.stats.reusedFiles++
	default:
		f.stats.resumedFiles++
	}
	if n := kept.Load(); n > 0 {
		log.G(ctx).WithField("file", t.path).WithField("bytes", n).WithField("units", units.Load()).Info("peer: kept units of an interrupted fetch reused")
	}
	return nil
}

// keptUnit takes a unit whose kept bytes matched as landed, reused.
func (f *fetcher) keptUnit(u *unit) error {
	if err := f.setPart(u); err != nil {
		return err
	}
	if !f.units.markDone(u) {
		return nil
	}
	if err := f.verified(u.dst.path, u.dstOff, u.n); err != nil {
		return err
	}
	f.stats.reusedUnit(u.n)
	if u.dst.pending.Add(-1) == 0 {
		f.closeTarget(u.dst)
	}
	return nil
}
