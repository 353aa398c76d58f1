package peer

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// serve runs a server of d on a loopback port until the test ends, and
// returns it with its address.
func serve(tb testing.TB, d *store.Domain, cfg ServerConfig) (*Server, string) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return serveOn(tb, d, cfg, l), l.Addr().String()
}

func serveOn(tb testing.TB, d *store.Domain, cfg ServerConfig, l net.Listener) *Server {
	s, _ := serveStoppable(tb, d, cfg, l)
	return s
}

// serveStoppable serves on l until stop is called (or the test ends); stop
// closes every connection and waits.
func serveStoppable(tb testing.TB, d *store.Domain, cfg ServerConfig, l net.Listener) (*Server, func()) {
	tb.Helper()
	s, err := NewServer(d, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ctx, l)
	}()
	// Serve takes the store's serve lock before it accepts: any answer to a
	// listing (an error too) says builds of d now announce their progress.
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	ClientConfig{}.List(lctx, l.Addr().String())
	lcancel()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			tb.Error("server did not stop")
		}
	}
	tb.Cleanup(stop)
	return s, stop
}

func digestOf(tb testing.TB, id artifact.Identity) string {
	tb.Helper()
	d, err := id.ID()
	if err != nil {
		tb.Fatal(err)
	}
	return d.String()
}

// verifyFull looks the artifact up with a full checksum of every byte.
func verifyFull(tb testing.TB, d *store.Domain, id artifact.ID) {
	tb.Helper()
	l, err := d.Lookup(context.Background(), id, store.FullChecksum)
	if err != nil {
		tb.Fatalf("full verification: %v", err)
	}
	l.Close()
}

// mustRequest parses a model request.
func mustRequest(tb testing.TB, s string) wire.Request {
	tb.Helper()
	q, err := wire.ParseRequest(s)
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// buildWaiters counts the goroutines of this process that wait, in a
// store.Building, for a range its build has not verified yet: each is a
// server holding a request it may answer only once the builder verifies
// the range. Once a server holds one, a byte it would wrongly send early
// has been sent.
func buildWaiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("store.(*Building).wait("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// sessionsOf is how many sessions of id s serves now.
func (s *Server) sessionsOf(id artifact.ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.children[childKey{id: id}]
}

// waitSessionsEnd waits until s serves no session of id. A peer ends a
// session its client left when it sees the connection go: until then, at
// the default MaxChildren of 1, a second session of the artifact is
// answered busy.
func waitSessionsEnd(t *testing.T, s *Server, id artifact.ID) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool { return s.sessionsOf(id) == 0 },
		"the peer still serves a session its client left")
}

// admitting is FetchOptions whose Admit asks the fetch for the sha256
// check a kept signature record would (oci.Carrier.CheckSHA256) when check
// is set.
func admitting(check bool) FetchOptions {
	return FetchOptions{Admit: func(_ context.Context, _ artifact.ID, prod artifact.Producer) error {
		if check {
			prod.(*fetcher).CheckSHA256()
		}
		return nil
	}}
}
