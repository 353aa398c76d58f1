package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/internal/netfail"
)

// DownPeers remembers the peers that failed to answer, each for a bounded
// time, so a dead peer costs one fetch its wait rather than every fetch.
// A source choice passes over a remembered peer; once its time runs
// out the next choice asks it again, and another failure remembers it for
// twice as long (downFirst, at most downMax). An answer forgets it. A nil
// *DownPeers remembers nothing.
type DownPeers struct {
	now   func() time.Time
	downs prometheus.Counter

	mu    sync.Mutex
	peers map[string]downPeer
}

// downPeer is one remembered peer: until when, for how long the next
// failure remembers it, and its last failure.
type downPeer struct {
	until time.Time
	next  time.Duration
	err   error
}

// How long a peer that failed to answer is passed over: downFirst after
// its first failure, doubling with each failure after, at most downMax.
const (
	downFirst = 5 * time.Second
	downMax   = time.Minute
)

// NewDownPeers returns an empty memory of peers that failed to answer.
func NewDownPeers() *DownPeers {
	return &DownPeers{now: time.Now, peers: map[string]downPeer{},
		downs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "peer",
			Name: "down_total", Help: "Times a peer failed to answer (refused, timed out, hung up) and was passed over for a while."})}
}

// Register adds the memory's metric to r.
func (d *DownPeers) Register(r prometheus.Registerer) error { return r.Register(d.downs) }

// note records the outcome of reaching addr: a failure to answer
// remembers it, an answer forgets it. A failure of this node's own
// context (cancelled) says nothing about the peer.
func (d *DownPeers) note(ctx context.Context, addr string, err error) {
	if d == nil || errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !netfail.Unreachable(err) {
		delete(d.peers, addr)
		return
	}
	d.remember(addr, err)
}

// drop remembers addr as down for its failure err, whatever err is: a peer
// that served bytes that failed their check is passed over like one that
// failed to answer.
func (d *DownPeers) drop(addr string, err error) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remember(addr, err)
}

// remember records a failure of addr; called with mu held.
func (d *DownPeers) remember(addr string, err error) {
	p, ok := d.peers[addr]
	switch {
	case !ok:
		p.next = downFirst
	case d.now().Before(p.until): // a failure of an ask made before it was remembered
		p.err = err
		d.peers[addr] = p
		return
	}
	p.until, p.err = d.now().Add(p.next), err
	p.next = min(2*p.next, downMax)
	d.peers[addr] = p
	d.downs.Inc()
}

// down says whether addr is remembered as down now.
func (d *DownPeers) down(addr string) bool { return d.passedOver(addr) != nil }

// passedOver is the failure a source choice records for addr when it
// passes over it, remembered as down now: its last failure; nil when it
// is not remembered.
func (d *DownPeers) passedOver(addr string) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.peers[addr]
	if !ok || !d.now().Before(p.until) {
		return nil
	}
	return fmt.Errorf("passed over until %s, after: %w", p.until.Format(time.TimeOnly), p.err)
}

// split returns the peers not remembered as down, in their order, and
// the ones that are.
func (d *DownPeers) split(addrs []string) (up, down []string) {
	for _, a := range addrs {
		if d.down(a) {
			down = append(down, a)
		} else {
			up = append(up, a)
		}
	}
	return up, down
}

// last returns addrs with the peers remembered as down moved to the end.
func (d *DownPeers) last(addrs []string) []string {
	up, down := d.split(addrs)
	return slices.Concat(up, down)
}
