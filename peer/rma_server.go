//go:build libfabric

package peer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// rmaServePlane is the server side of an rma session: a passive endpoint
// per rail, and every shard's mapping registered read-only for remote reads
// on every rail until the session ends. Once the rails are connected the
// server's process does nothing more for the transfer: the fabric (or the
// provider's own progress) answers the client's one-sided reads.
type rmaServePlane struct {
	ss        *session
	provider  string
	hosts     []string
	timeout   time.Duration
	listeners []*fabric.Listener
	ports     []int
	eps       []*fabric.EP
	mrs       []*fabric.MR
	stop      chan struct{}
	progress  sync.WaitGroup
}

// probeRMA checks the configured provider once, at the server's start (it
// also pays libfabric's discovery of its providers there, not during a
// session).
func probeRMA(provider string) error { return fabric.Probe(provider) }

func newRMAServePlane(provider string, ss *session, hosts []string, timeout time.Duration) (servePlane, error) {
	p := &rmaServePlane{ss: ss, provider: provider, hosts: hosts, timeout: timeout, stop: make(chan struct{})}
	for _, h := range hosts {
		l, port, err := fabric.Listen(provider, h)
		if err != nil {
			p.close()
			return nil, err
		}
		p.listeners = append(p.listeners, l)
		p.ports = append(p.ports, port)
	}
	return p, nil
}

func (p *rmaServePlane) endpoints() [][]byte {
	out := make([][]byte, len(p.hosts))
	for r, h := range p.hosts {
		out[r] = wire.EncodeRMAEndpoint(p.listeners[r].Provider(), h, p.ports[r])
	}
	return out
}

// ready accepts every rail, then registers every shard on each. A rail is
// awaited no longer than the client waits for its connect (dialTimeout), so
// a session whose client gave up frees its listeners then; registering,
// which may take long for large shards, comes after all the client's
// connects, not between them.
func (p *rmaServePlane) ready(ctx context.Context) ([]byte, error) {
	for r, l := range p.listeners {
		ep, err := l.Accept(min(p.timeout, dialTimeout))
		if err != nil {
			return nil, fmt.Errorf("rail %d: %w", r, err)
		}
		p.eps = append(p.eps, ep)
	}
	keys := make([][]wire.RemoteKey, len(p.eps))
	for r, ep := range p.eps {
		keys[r] = make([]wire.RemoteKey, len(p.ss.sv.shards))
		for i, s := range p.ss.sv.shards {
			if len(s.data) == 0 {
				continue // an empty shard is never read
			}
			var rk [8]byte
			rand.Read(rk[:])
			mr, err := ep.Register(s.data, fabric.AccessRemoteRead, binary.LittleEndian.Uint64(rk[:]))
			if err != nil {
				return nil, fmt.Errorf("rail %d: register %s: %w", r, s.entry.Path, err)
			}
			p.mrs = append(p.mrs, mr)
			keys[r][i] = wire.RemoteKey{Base: mr.RAddr, Key: mr.Key}
		}
		p.progress.Go(func() { p.drive(ep) })
	}
	return wire.EncodeKeyTable(keys), nil
}

// drive waits on the rail's completion queue on a locked OS thread, for
// providers whose target side must be driven; it reads no payload.
func (p *rmaServePlane) drive(ep *fabric.EP) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		if ep.Progress(50*time.Millisecond) != nil {
			return
		}
	}
}

// close deregisters every shard and closes the rails and listeners.
func (p *rmaServePlane) close() {
	close(p.stop)
	p.progress.Wait()
	for _, mr := range p.mrs {
		mr.Close()
	}
	for _, ep := range p.eps {
		ep.Close()
	}
	for _, l := range p.listeners {
		l.Close()
	}
}
