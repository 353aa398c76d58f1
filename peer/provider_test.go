package peer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/netfail"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// TestProviderPassesOverDownPeers: a peer that is down or black-holed
// costs the connect timeout, never the read timeout (an hour here), and
// is no rendezvous root: a node that would wait for a dead root to
// announce its build goes on at once (RootWait is an hour here too), so
// resolution reaches the registry in seconds. A holder beside dead peers
// serves the artifact.
func TestProviderPassesOverDownPeers(t *testing.T) {
	d, id := storetest.Seeded(t, 256<<10, 1)
	_, holder := serve(t, d, ServerConfig{})
	_, empty := serve(t, storetest.Open(t), ServerConfig{})
	digest, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	hole := testenv.BlackHole(t)
	// The dead peer ranks first, then self, then the peer without it: only
	// a dead root could make this node wait.
	dead := testenv.ClosedAddr(t)
	for stripes.Rank(digest, []string{dead, empty})[0] != dead {
		dead = testenv.ClosedAddr(t)
	}
	self := ""
	for port := 1; self == ""; port++ {
		s := fmt.Sprintf("127.0.0.2:%d", port)
		if r := stripes.Rank(digest, []string{dead, empty, s}); r[0] == dead && r[1] == s {
			self = s
		}
	}
	for _, tc := range []struct {
		name    string
		peers   []string
		served  bool
		unreach bool // else a clean miss
	}{
		{"one peer down", []string{dead}, false, true},
		{"one peer black-holed", []string{hole}, false, true},
		{"every peer down", []string{dead, hole}, false, true},
		{"a dead root and a peer without it", []string{dead, hole, empty}, false, false},
		{"dead peers and a holder", []string{dead, hole, holder}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{Peers: tc.peers, Self: self, RootWait: time.Hour,
				Options: FetchOptions{Client: ClientConfig{Timeout: time.Hour, ConnectTimeout: 300 * time.Millisecond}}}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prod, err := p.Producer(ctx, id)
			if ctx.Err() != nil {
				t.Fatalf("waited out the test's minute: %v", err)
			}
			if tc.served {
				if err != nil || prod == nil {
					t.Fatalf("the holder did not serve: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("served by no peer")
			}
			if got := netfail.Unreachable(err) && !errdefs.IsNotFound(err); got != tc.unreach {
				t.Fatalf("unreachable (and not a miss) %v, want %v: %v", got, tc.unreach, err)
			}
			if !tc.unreach && !errdefs.IsNotFound(err) {
				t.Fatalf("not a miss: %v", err)
			}
		})
	}
}

// TestProviderLoneResolve: a node that is not the root, among members that
// all answer, takes the origin after a look and a settle when no member
// ranked above it wants the artifact (no root is coming), counted under
// its reason, well before RootWait; while one ranked above it wants it,
// or one that answered the choice is down by the look (it may have died
// building, and its child takes its place), the node waits for it as for a
// root.
func TestProviderLoneResolve(t *testing.T) {
	_, identity := seededInPieces(t, 1)
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		aboveWants bool
		aboveDies  bool
		rootWait   time.Duration
		reason     string
	}{
		{"no member above wants it", false, false, time.Hour, "no member ranked above this node wants the artifact"},
		{"a member above wants it", true, false, 300 * time.Millisecond, "no source after the wait"},
		{"a member above dies after the choice", false, true, 300 * time.Millisecond, "no source after the wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ms := forestOf(t, id, 5)
			for i, m := range ms {
				m.d = storetest.Open(t)
				l := m.l
				if i == 1 && tc.aboveDies {
					// Its serve's own first listing, then the choice's: the look finds it down.
					l = &closeAfter{Listener: l, left: 2}
				}
				serveOn(t, m.d, ServerConfig{}, l)
			}
			if tc.aboveWants {
				release, err := ms[1].d.Want(id)
				if err != nil {
					t.Fatal(err)
				}
				defer release()
			}
			lone := ms[2]
			lone.p.Options.Structure, lone.p.RootWait = StructureChain, tc.rootWait
			lone.p.Wants = func(_ context.Context, id artifact.ID) (func(), error) { return lone.d.Want(id) }
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, _, err := lone.p.ProducerForID(ctx, id); !errdefs.IsNotFound(err) {
				t.Fatalf("%v, want a clean miss", err)
			}
			if got := testutil.ToFloat64(lone.p.originCounter().WithLabelValues(tc.reason)); got != 1 {
				t.Errorf("origin_total{reason=%q} = %v, want 1", tc.reason, got)
			}
			if w := lone.d.Wants(); !slices.Contains(w, id) {
				t.Errorf("the node's store wants %v right after its choice, want %s until RootWait passes", w, id.Short())
			}
		})
	}
}

// closeAfter is a listener that serves left connections and then goes
// down: the next one it is offered is closed unanswered, and so is the
// listener.
type closeAfter struct {
	net.Listener
	left int
}

func (l *closeAfter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.left > 0 {
		l.left--
		return c, err
	}
	c.Close()
	l.Listener.Close()
	return nil, net.ErrClosed
}
