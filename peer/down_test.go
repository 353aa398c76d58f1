package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
)

// TestDownPeersRemembers: a peer that failed to answer is remembered for
// downFirst, then twice as long after each failure up to downMax; an
// answer of any kind forgets it; a cancelled ask says nothing; each
// failure that remembers it is counted once.
func TestDownPeersRemembers(t *testing.T) {
	refused := &Error{Addr: "a", Err: syscall.ECONNREFUSED}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type step struct {
		ctx     context.Context
		err     error         // noted, unless after is set
		after   time.Duration // the clock moves on
		down    bool          // remembered afterwards
		counted float64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a refusal is remembered for downFirst", []step{
			{err: refused, down: true, counted: 1},
			{after: downFirst - time.Millisecond, down: true, counted: 1},
			{after: time.Millisecond, down: false, counted: 1},
		}},
		{"each failure after doubles the time", []step{
			{err: refused, down: true, counted: 1},
			{after: downFirst, down: false, counted: 1},
			{err: refused, down: true, counted: 2},
			{after: 2*downFirst - time.Millisecond, down: true, counted: 2},
			{after: time.Millisecond, down: false, counted: 2},
		}},
		{"the time is at most downMax", []step{
			{err: refused, down: true, counted: 1},
			{after: downMax, counted: 1}, {err: refused, down: true, counted: 2},
			{after: downMax, counted: 2}, {err: refused, down: true, counted: 3},
			{after: downMax, counted: 3}, {err: refused, down: true, counted: 4},
			{after: downMax, counted: 4}, {err: refused, down: true, counted: 5},
			{after: downMax - time.Millisecond, down: true, counted: 5},
			{after: time.Millisecond, down: false, counted: 5},
		}},
		{"a failure while remembered is counted once", []step{
			{err: refused, down: true, counted: 1},
			{err: &Error{Addr: "a", Err: fmt.Errorf("no listing in time: %w", os.ErrDeadlineExceeded)}, down: true, counted: 1},
			{after: downFirst, down: false, counted: 1},
		}},
		{"an answer forgets it and its doubling", []step{
			{err: refused, down: true, counted: 1},
			{err: &Error{Addr: "a", Err: errdefs.ErrNotFound}, down: false, counted: 1},
			{err: refused, down: true, counted: 2},
			{after: downFirst, down: false, counted: 2},
		}},
		{"a cancelled ask says nothing", []step{
			{ctx: cancelled, err: refused, down: false, counted: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			d := NewDownPeers()
			d.now = func() time.Time { return now }
			for i, s := range tc.steps {
				if s.after > 0 || s.err == nil {
					now = now.Add(s.after)
				} else {
					ctx := s.ctx
					if ctx == nil {
						ctx = context.Background()
					}
					d.note(ctx, "a", s.err)
				}
				if s.after > 0 && s.err != nil {
					t.Fatalf("step %d: a step either notes or moves the clock", i)
				}
				if got := d.down("a"); got != s.down {
					t.Fatalf("step %d: down %v, want %v", i, got, s.down)
				}
				if got := testutil.ToFloat64(d.downs); got != s.counted {
					t.Fatalf("step %d: counted %v, want %v", i, got, s.counted)
				}
				if s.down && !errors.Is(d.passedOver("a"), s.err) && s.err != nil {
					t.Fatalf("step %d: passed over with %v, want its last failure %v", i, d.passedOver("a"), s.err)
				}
			}
		})
	}
}

// TestFetchPassesOverDeadPeer: with a dead peer listed first and a holder
// second, the first fetch is served by the holder and remembers the dead
// peer; the next fetch and prefix lookup never reach it.
func TestFetchPassesOverDeadPeer(t *testing.T) {
	d, id := storetest.Seeded(t, 256<<10, 1)
	srv, holder := serve(t, d, ServerConfig{})
	digest, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	hole, accepted := testenv.CountingBlackHole(t)
	for _, tc := range []struct {
		name    string
		dead    string
		reached func() int64 // connections the dead peer saw, where it can tell
	}{
		{"refusing", testenv.ClosedAddr(t), nil},
		{"black-holed", hole, accepted.Load},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{Peers: []string{tc.dead, holder},
				Options: FetchOptions{Client: ClientConfig{Timeout: time.Hour, ConnectTimeout: 300 * time.Millisecond}}}
			ctx := context.Background()
			waitSessionsEnd(t, srv, digest) // the last subtest's
			if _, err := p.Producer(ctx, id); err != nil {
				t.Fatalf("first fetch: %v", err)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return p.Down().down(tc.dead) }, "the dead peer is not remembered")
			counted := testutil.ToFloat64(p.Down().downs)
			var reached int64
			if tc.reached != nil {
				reached = tc.reached()
			}
			waitSessionsEnd(t, srv, digest) // the first fetch's
			prod, err := p.Producer(ctx, id)
			if err != nil {
				t.Fatalf("second fetch: %v", err)
			}
			if got := prod.(*fetcher).src.peers[0]; got != holder {
				t.Fatalf("second fetch asks %s first, want the holder %s", got, holder)
			}
			got, err := p.Options.Client.LookupPrefix(ctx, []string{tc.dead, holder}, digest.Hex()[:12])
			if err != nil || got != digest.String() {
				t.Fatalf("prefix lookup = %q, %v; want %s", got, err, digest)
			}
			if n := testutil.ToFloat64(p.Down().downs); n != counted {
				t.Fatalf("the dead peer failed %v more times after it was remembered", n-counted)
			}
			if tc.reached != nil && tc.reached() != reached {
				t.Fatalf("the dead peer was reached %d more times after it was remembered", tc.reached()-reached)
			}
		})
	}
}
