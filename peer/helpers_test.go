package peer

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

const testRevision = "0123456789abcdef0123456789abcdef01234567"

// checkpoint writes a synthetic checkpoint of about size bytes in shards.
func checkpoint(tb testing.TB, size int64, shards int) (string, *artifact.SourceDir) {
	tb.Helper()
	return synthCheckpoint(tb, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: 7})
}

// synthCheckpoint writes a synthetic checkpoint of opts.
func synthCheckpoint(tb testing.TB, opts synth.Options) (string, *artifact.SourceDir) {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "ckpt")
	if err := synth.Write(context.Background(), dir, opts); err != nil {
		tb.Fatal(err)
	}
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	return dir, src
}

func openStore(tb testing.TB) *store.Domain {
	tb.Helper()
	d, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "store"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// seeded is a store holding a synthetic artifact, and its identity.
func seeded(tb testing.TB, size int64, shards int) (*store.Domain, artifact.Identity) {
	tb.Helper()
	_, src := checkpoint(tb, size, shards)
	return seededSource(tb, src)
}

// seededSource is a store holding the artifact of src, and its identity.
func seededSource(tb testing.TB, src *artifact.SourceDir) (*store.Domain, artifact.Identity) {
	tb.Helper()
	d := openStore(tb)
	id := artifact.PassthroughIdentity(src, "org/model", testRevision, "", 0, 0)
	l, _, err := d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: src})
	if err != nil {
		tb.Fatal(err)
	}
	l.Close()
	return d, id
}

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
