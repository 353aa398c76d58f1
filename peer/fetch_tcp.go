package peer

import (
	"context"
	"errors"
	"hash"
	"sync"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"golang.org/x/sync/errgroup"
)

// Buffers of a tcp rail: how much it reads from the socket at a time, how
// many such reads may wait to be hashed and written, and how many range
// requests may be outstanding, on a rail of one stripe fewer, so a
// stripe's pieces stay unclaimed for its endgame (stripe_endgame.go).
const (
	railChunk    = 1 << 20
	railBuffers  = 4
	railWindow   = 16
	stripeWindow = 3
)

// runTCP runs one rail connection per rail, concurrently; the first
// failure stops the others.
func (f *fetcher) runTCP(ctx context.Context, cs *clientSession, byRail [][]*unit) error {
	g, gctx := errgroup.WithContext(ctx)
	for r, units := range byRail {
		if len(units) > 0 {
			g.Go(func() error { return f.tcpRail(gctx, cs, r, units) })
		}
	}
	return g.Wait()
}

// tcpRail attaches a connection to the session as rail r, sends every
// range request, and receives the answers in order.
func (f *fetcher) tcpRail(ctx context.Context, cs *clientSession, r int, units []*unit) error {
	addr, err := cs.railAddr(r)
	if err != nil {
		return &Error{Addr: cs.addr, Err: err}
	}
	conn, br, err := cs.cfg.dial(ctx, addr, wire.OpRail, false)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	peerErr := func(err error) error { return &Error{Addr: addr, Err: err} }
	if _, err := conn.Write(wire.RailAttach{Secret: cs.secret, Generation: cs.gen, Rail: byte(r)}.Encode()); err != nil {
		return peerErr(err)
	}
	if err := wire.ReadStatus(br, "rail attach"); err != nil {
		var re *wire.RemoteError
		if errors.As(err, &re) && re.Code == wire.StatusStale {
			err = &StaleGenerationError{Addr: addr, Want: cs.manifest.Generation, Got: re.Message}
		}
		return peerErr(err)
	}
	// At most railWindow requests (stripeWindow on a stripe's rail) are
	// outstanding, so a request never waits on a peer busy sending a large
	// range. A unit another session of a striped fetch claimed, or
	// verified, is not asked for.
	size := railWindow
	if cs.stripe.Count > 0 {
		size = stripeWindow
	}
	window := make(chan struct{}, size)
	sent := make(chan ask, size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	by := &railClaim{addr: cs.addr}
	var sending sync.WaitGroup
	var werr error
	sending.Go(func() {
		defer close(sent)
		for _, a := range asks(units, f.piecesFrom(cs), cs.stripe) {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if a.pieces == nil && !f.units.claim(a.u, by) {
				<-window
				continue
			}
			q := wire.RangeRequest{Shard: uint32(a.u.shard), Off: uint64(a.u.off), N: uint64(a.u.n), Pieces: a.pieces != nil}
			if _, werr = conn.Write(q.Encode()); werr != nil {
				conn.Close()
				return
			}
			sent <- a
		}
	})
	err = f.receive(ctx, addr, newWakeReader(conn, br), sent, window)
	cancel()
	sending.Wait()
	f.units.release(by)
	if err == nil && werr != nil {
		err = peerErr(werr)
	}
	return err
}

// chunk is a part of a unit read from a rail, waiting to be hashed and
// written, or the chaining values of a unit's pieces.
type chunk struct {
	u      *unit
	b      []byte
	off    int64 // in the unit
	last   bool
	sum    artifact.Sum // the unit's BLAKE3 (a piece's chaining value), in its last chunk
	pieces []*unit      // set: cvs are the chaining values of these pieces of u
	cvs    [][32]byte
	err    error
}

// receive reads the answers to asks in order: a reader fills a few
// buffers from the socket, the caller hashes each unit's bytes, and a
// writer puts them into its target; a unit is done once it is written and
// its BLAKE3 matches. A unit's pieces are its once their chaining values,
// taken in order by the writer, matched. Each answer read frees a place
// in the request window.
func (f *fetcher) receive(ctx context.Context, addr string, r *wakeReader, as <-chan ask, window <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan []byte, railBuffers)
	for range railBuffers {
		free <- make([]byte, railChunk)
	}
	full := make(chan chunk, railBuffers)
	go func() {
		defer close(full)
		send := func(c chunk) bool {
			select {
			case full <- c:
				return c.err == nil
			case <-ctx.Done():
				return false
			}
		}
		for a := range as {
			u := a.u
			if a.pieces != nil {
				cvs, err := wire.ReadPieceCVs(r.lowest(), uint64(u.n), blake3.PieceSize)
				if !send(chunk{u: u, pieces: a.pieces, cvs: cvs, err: err}) {
					return
				}
				<-window
				continue
			}
			if err := wire.ReadStatus(r.lowest(), "range"); err != nil {
				send(chunk{err: err})
				return
			}
			for off := int64(0); off < u.n; {
				var b []byte
				select {
				case b = <-free:
				case <-ctx.Done():
					return
				}
				// Reads end where the file's offset is a multiple of
				// railChunk: after a unit's first read, its writes fill
				// whole pages of the page cache, wherever the unit starts.
				k := min(railChunk-(u.dstOff+off)%railChunk, u.n-off)
				err := wire.ReadFull(r, b[:k], "range data")
				if !send(chunk{u: u, b: b[:k], off: off, last: off+k == u.n, err: err}) {
					return
				}
				off += k
			}
			<-window
		}
	}()
	// A write that waits for the page cache or the disk does not hold up
	// the hash of the next chunk.
	hashed := make(chan chunk, railBuffers)
	werr := make(chan error, 1)
	go func() {
		var err error
		for c := range hashed {
			if err == nil {
				if c.pieces != nil {
					err = f.split(addr, c.u, c.pieces, c.cvs)
				} else if _, err = c.u.dst.out.WriteAt(c.b, c.u.dstOff+c.off); err == nil && c.last {
					if err = f.landed(addr, c.u, c.sum); err == nil {
						log.G(ctx).WithField("peer", addr).WithField("file", c.u.dst.path).WithField("offset", c.u.dstOff).Debug("peer: unit verified")
					}
				}
				if err != nil {
					cancel()
				}
			}
			if c.b != nil {
				free <- c.b[:cap(c.b)]
			}
		}
		werr <- err
	}()
	rerr := f.hashChunks(ctx, addr, full, hashed)
	close(hashed)
	if err := <-werr; err != nil {
		return err // the store's failure, or a unit that did not match
	}
	if rerr != nil {
		return rerr
	}
	return ctx.Err()
}

// hashChunks hashes the chunks of each unit in order, puts the unit's
// BLAKE3 (a piece's chaining value) in its last chunk, and hands every
// chunk on to be written, until the chunks end, one carries the rail's
// failure, or ctx is done.
func (f *fetcher) hashChunks(ctx context.Context, addr string, full <-chan chunk, hashed chan<- chunk) error {
	whole := blake3.New()
	var h hash.Hash
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-full:
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case !ok:
			return nil
		case c.err != nil:
			return &Error{Addr: addr, Err: c.err}
		}
		if c.pieces != nil {
			hashed <- c
			continue
		}
		if c.off == 0 {
			whole.Reset()
			h = whole
			if c.u.parent != nil {
				h = blake3.NewPieceHasher(c.u.piece)
			}
		}
		h.Write(c.b)
		if c.last {
			h.Sum(c.sum[:0])
		}
		hashed <- c
	}
}
