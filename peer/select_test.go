package peer

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestNewFetcherSkipsAbsentPeers: a choice of a source lists every peer
// and opens a session only with one that listed the artifact: a clean
// miss costs each peer its listing alone, not a session it would refuse,
// and a holder among peers without it is asked alone.
func TestNewFetcherSkipsAbsentPeers(t *testing.T) {
	d, identity := storetest.Seeded(t, 256<<10, 1)
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		holder bool
	}{
		{"no peer holds it", false},
		{"one peer of four holds it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var peers []string
			var ls []*countingListener
			for i := range 4 {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				cl := &countingListener{Listener: l}
				src := storetest.Open(t)
				if tc.holder && i == 2 {
					src = d
				}
				serveOn(t, src, ServerConfig{}, cl)
				cl.accepted.Store(0) // serveOn's listing, that the server is up
				peers, ls = append(peers, l.Addr().String()), append(ls, cl)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f, err := newFetcher(ctx, peers, wire.Request{ID: id}, FetchOptions{}, false)
			switch {
			case tc.holder && err != nil:
				t.Fatalf("the holder did not serve: %v", err)
			case !tc.holder && !errdefs.IsNotFound(err):
				t.Fatalf("%v, want a clean miss", err)
			}
			if f != nil && f.src.sess != nil {
				f.src.closeSession()
			}
			// A miss waits for every listing; a holder's choice may return
			// before the peers after it accepted theirs.
			for i, l := range ls {
				got := l.accepted.Load()
				switch {
				case tc.holder && i == 2 && got != 2:
					t.Errorf("the holder accepted %d connections, want 2: the listing and the session", got)
				case !(tc.holder && i == 2) && (got > 1 || !tc.holder && got != 1):
					t.Errorf("peer %d, without the artifact, accepted %d connections, want its listing alone", i, got)
				}
			}
		})
	}
}
