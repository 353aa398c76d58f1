//go:build libfabric

package peer

import (
	"context"
	"sync/atomic"
	"unsafe"

	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"

	"golang.org/x/sync/errgroup"
)

// Posting of one-sided reads: units are read in batches of about
// rmaBatchBytes (a larger unit alone), each batch in reads of at most
// rmaChunk bytes with rmaWindow in flight; a batch is hashed while the
// next one is read.
const (
	rmaBatchBytes = 16 << 20
	rmaChunk      = 1 << 20
	rmaWindow     = 16
)

// rmaAsks is how many unit key requests (CtlUnit) may be outstanding on a
// session's control connection: the server answers them in order, each
// once its unit is verified.
const rmaAsks = 64

// asked is a rail's unit keys in the order of its units asked for.
type asked chan wire.RemoteKey

// runRMA connects one fabric endpoint per rail, reads the session's key
// table and runs the rails concurrently. Every endpoint is closed before it
// returns, so no read lands in a destination after.
func (f *fetcher) runRMA(ctx context.Context, cs *clientSession, byRail [][]*unit) error {
	eps := make([]*fabric.EP, 0, cs.rails)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	for r := range cs.rails {
		e, err := wire.DecodeRMAEndpoint(cs.endpoints[r])
		if err != nil {
			return &Error{Addr: cs.addr, Err: err}
		}
		ep, err := fabric.Connect(e.Provider, e.Host, e.Port, min(cs.cfg.Timeout, dialTimeout))
		if err != nil {
			return &Error{Addr: cs.addr, Err: err}
		}
		eps = append(eps, ep)
	}
	keys, err := cs.readKeys(len(f.base.Shards))
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	rails := askUnitKeys(gctx, g, cs, keys, byRail)
	for r, units := range byRail {
		if len(units) > 0 {
			g.Go(func() error { return f.rmaRail(gctx, cs, eps[r], keys[r], rails[r], units) })
		}
	}
	return g.Wait()
}

// askUnitKeys asks, on the control connection, for the key of every unit
// whose shard the key table leaves unregistered (a building artifact's),
// in the order of the session's units, at most rmaAsks outstanding, and
// hands each answer to its rail. A refusal (the build ended: the peer's
// typed reason) fails the group; a failure elsewhere in the group closes
// the control connection, so no answer is awaited past it.
func askUnitKeys(ctx context.Context, g *errgroup.Group, cs *clientSession, keys [][]wire.RemoteKey, byRail [][]*unit) []asked {
	type ask struct {
		rail int
		u    *unit
	}
	var asks []ask
	rails := make([]asked, len(byRail))
	n := make([]int, len(byRail))
	for i := 0; ; i++ {
		more := false
		for r, units := range byRail {
			if i < len(units) {
				more = true
				if u := units[i]; keys[r][u.shard] == (wire.RemoteKey{}) {
					asks = append(asks, ask{r, u})
					n[r]++
				}
			}
		}
		if !more {
			break
		}
	}
	if len(asks) == 0 {
		return rails
	}
	for r := range rails {
		rails[r] = make(asked, n[r])
	}
	stop := context.AfterFunc(ctx, func() { cs.conn.Close() })
	window := make(chan struct{}, rmaAsks)
	g.Go(func() error {
		for _, a := range asks {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			q := wire.UnitKeyRequest{Rail: byte(a.rail), RangeRequest: wire.RangeRequest{Shard: uint32(a.u.shard), Off: uint64(a.u.off), N: uint64(a.u.n)}}
			cs.wmu.Lock()
			_, err := cs.conn.Write(wire.Enc{wire.CtlUnit}.Raw(q.Encode()))
			cs.wmu.Unlock()
			if err != nil {
				return nil // the reader fails with the connection
			}
		}
		return nil
	})
	g.Go(func() error {
		defer stop()
		for _, a := range asks {
			k, err := wire.ReadUnitKey(cs.r)
			if err != nil {
				return &Error{Addr: cs.addr, Err: err}
			}
			<-window
			rails[a.rail] <- k
		}
		return nil
	})
	return rails
}

// rmaRail reads its units with batched one-sided reads straight into the
// targets' mappings, and verifies each unit's BLAKE3 from the mapping. A
// unit whose shard has no key takes the next of the keys asked for it: a
// batch waits for its first unit's key, and ends at a unit whose key has
// not come yet.
func (f *fetcher) rmaRail(ctx context.Context, cs *clientSession, ep *fabric.EP, keys []wire.RemoteKey, unitKeys asked, units []*unit) error {
	descs := map[*target]unsafe.Pointer{}
	if ep.NeedsLocalMR() {
		for _, u := range units {
			if _, ok := descs[u.dst]; ok || len(u.dst.mapping) == 0 {
				continue
			}
			mr, err := ep.Register(u.dst.mapping, fabric.AccessLocalRead, 0)
			if err != nil {
				return err
			}
			defer mr.Close()
			descs[u.dst] = mr.Desc
		}
	}
	var cancel atomic.Int32
	stop := context.AfterFunc(ctx, func() { cancel.Store(1) })
	defer stop()
	batches := make(chan []*unit, 1)
	verified := make(chan error, 1)
	go func() {
		var err error
		for b := range batches {
			for _, u := range b {
				if err == nil {
					err = f.verifyMapped(cs.addr, u)
				}
			}
		}
		verified <- err
	}()
	var err error
	for len(units) > 0 && err == nil {
		var batch []*unit
		var ops []fabric.ReadOp
		for n := int64(0); len(units) > 0 && (len(batch) == 0 || n+units[0].n <= rmaBatchBytes); units = units[1:] {
			u := units[0]
			k, at := keys[u.shard], uint64(u.off)
			if k == (wire.RemoteKey{}) {
				got := false
				if len(batch) == 0 {
					select {
					case k, got = <-unitKeys:
					case <-ctx.Done():
						err = ctx.Err()
					}
				} else {
					select {
					case k, got = <-unitKeys:
					default:
					}
				}
				if !got {
					break // the next batch's first unit, or the end on an error
				}
				at = 0 // the key is the unit's own registration
			}
			batch, n = append(batch, u), n+u.n
			ops = append(ops, fabric.ReadOp{Dst: u.dst.mapping[u.dstOff : u.dstOff+u.n], Desc: descs[u.dst],
				RAddr: k.Base + at, Key: k.Key})
		}
		if err != nil {
			break
		}
		if err = ep.ReadBatch(ops, rmaChunk, rmaWindow, cs.cfg.Timeout, &cancel); err != nil {
			err = &Error{Addr: cs.addr, Err: err}
			break
		}
		batches <- batch
	}
	close(batches)
	if verr := <-verified; err == nil {
		err = verr
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// verifyMapped hashes a unit from its target's mapping, where it landed.
func (f *fetcher) verifyMapped(addr string, u *unit) error {
	return f.landed(addr, u, blake3.Sum256(u.dst.mapping[u.dstOff:u.dstOff+u.n]))
}
