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
			return &PeerError{Addr: cs.addr, Err: err}
		}
		ep, err := fabric.Connect(e.Provider, e.Host, e.Port, min(cs.cfg.Timeout, dialTimeout))
		if err != nil {
			return &PeerError{Addr: cs.addr, Err: err}
		}
		eps = append(eps, ep)
	}
	keys, err := cs.readKeys(len(f.base.Shards))
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for r, units := range byRail {
		if len(units) > 0 {
			g.Go(func() error { return f.rmaRail(gctx, cs, eps[r], keys[r], units) })
		}
	}
	return g.Wait()
}

// rmaRail reads its units with batched one-sided reads straight into the
// targets' mappings, and verifies each unit's BLAKE3 from the mapping.
func (f *fetcher) rmaRail(ctx context.Context, cs *clientSession, ep *fabric.EP, keys []wire.RemoteKey, units []*unit) error {
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
			batch, n = append(batch, u), n+u.n
			k := keys[u.shard]
			ops = append(ops, fabric.ReadOp{Dst: u.dst.mapping[u.dstOff : u.dstOff+u.n], Desc: descs[u.dst],
				RAddr: k.Base + uint64(u.off), Key: k.Key})
		}
		if err = ep.ReadBatch(ops, rmaChunk, rmaWindow, cs.cfg.Timeout, &cancel); err != nil {
			err = &PeerError{Addr: cs.addr, Err: err}
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
