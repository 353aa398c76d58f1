package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// rawSession sends a hello and a raw body to addr. It returns the reader and
// the connection, for more, and the answer's status as an error (nil for OK).
func rawSession(t *testing.T, addr string, op byte, token string, body []byte) (*bufio.Reader, net.Conn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(wire.Hello{Op: op, Token: []byte(token)}.Encode(), body...)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	return r, c, wire.ReadStatus(r, "answer")
}

// allocated runs fn and returns the bytes this process allocated meanwhile.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestServerRefuses: every bad request gets a clear, typed refusal, and a
// huge length costs no allocation beyond the limits.
func TestServerRefuses(t *testing.T) {
	d, id := storetest.Seeded(t, 2<<20, 1)
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed")
	outside := filepath.Join(dir, "outside")
	for _, p := range []string{filepath.Join(allowed, "m", "snapshots", storetest.Revision), outside} {
		os.MkdirAll(p, 0o755)
	}
	os.WriteFile(filepath.Join(outside, "secret.safetensors"), []byte("not for you"), 0o644)
	os.WriteFile(filepath.Join(allowed, "m", "snapshots", storetest.Revision, "config.json"), []byte("{}"), 0o644)
	os.MkdirAll(filepath.Join(allowed, "linkfile"), 0o755)
	os.Symlink(filepath.Join(outside, "secret.safetensors"), filepath.Join(allowed, "linkfile", "x.safetensors"))
	os.Symlink(outside, filepath.Join(allowed, "linkdir"))
	_, addr := serve(t, d, ServerConfig{Token: "s3cret", Exports: []Export{
		{Name: "hub", Path: allowed}, {Name: "fixed", Path: allowed, Revision: storetest.Revision}}})
	ok := func(err error) bool { return err == nil }
	req := func(s string) []byte { return wire.Enc{}.Blob32([]byte(s)) }
	for _, tc := range []struct {
		name  string
		token string
		body  []byte
		want  func(error) bool
		says  string
	}{
		{"wrong token", "guess", req(digestOf(t, id)), errdefs.IsPermissionDenied, "bearer token refused: this peer's token file holds another; give the one it holds with --token-file or [peer] token_file"},
		{"no token", "", req(digestOf(t, id)), errdefs.IsPermissionDenied, "this peer requires a bearer token and none was presented: give its token file with --token-file or [peer] token_file"},
		{"request over the limit", "s3cret", wire.Enc{}.U32(0xffffffff), errdefs.IsInvalidArgument, "over the limit"},
		{"request just over", "s3cret", wire.Enc{}.U32(wire.ModelRequestMax + 1), errdefs.IsInvalidArgument, "over the limit"},
		{"unknown identity", "s3cret", req("sha256:" + strings.Repeat("ab", 32)), errdefs.IsNotFound, "no READY artifact"},
		{"not a digest", "s3cret", req("llama"), errdefs.IsInvalidArgument, "want sha256"},
		{"staged not allowlisted", "s3cret", req("staged:etc"), errdefs.IsNotFound, "not an allowlisted"},
		{"staged dot-dot", "s3cret", req("staged:hub/../outside"), errdefs.IsInvalidArgument, "leaves its root"},
		{"staged absolute", "s3cret", req("staged:hub//etc"), errdefs.IsInvalidArgument, "absolute"},
		{"staged unclean", "s3cret", req("staged:hub/m/./snapshots"), errdefs.IsInvalidArgument, "not clean"},
		{"staged symlinked file out", "s3cret", req("staged:fixed/linkfile"), errdefs.IsInvalidArgument, "leaves the allowlisted"},
		{"staged symlinked dir out", "s3cret", req("staged:fixed/linkdir"), errdefs.IsInvalidArgument, "leaves the allowlisted"},
		{"staged without revision", "s3cret", req("staged:hub/m"), errdefs.IsInvalidArgument, "no revision"},
		{"staged snapshot", "s3cret", req("staged:hub/m/snapshots/" + storetest.Revision), ok, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, _, err = rawSession(t, addr, wire.OpFetch, tc.token, tc.body) })
			if !tc.want(err) || (err != nil && !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("answer %v, want one saying %q", err, tc.says)
			}
			if err != nil && n > 1<<20 {
				t.Fatalf("the refusal allocated %d bytes", n)
			}
		})
	}
	t.Run("client checks the request length", func(t *testing.T) {
		_, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, "staged:"+strings.Repeat("a", wire.ModelRequestMax), FetchOptions{})
		if !isTooLarge(err) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestServerRefusesBadSession: after a valid manifest, a bad transport,
// rail or range is refused.
func TestServerRefusesBadSession(t *testing.T) {
	d, id := storetest.Seeded(t, 2<<20, 1)
	// A refused session is answered before the server lets it go, so the
	// next subtest's session may find it still counted: room for both.
	s, addr := serve(t, d, ServerConfig{MaxChildren: 2})
	open := func(t *testing.T) (*bufio.Reader, net.Conn) {
		t.Helper()
		r, c, err := rawSession(t, addr, wire.OpFetch, "", wire.Enc{}.Blob32([]byte(digestOf(t, id))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.ReadManifest(r, wire.DefaultManifestMax); err != nil {
			t.Fatal(err)
		}
		return r, c
	}
	t.Run("unknown mode", func(t *testing.T) {
		r, c := open(t)
		c.Write([]byte{9, 1})
		if err := wire.ReadStatus(r, "transport"); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("got %v", err)
		}
	})
	attach := func(a wire.RailAttach) (*bufio.Reader, net.Conn, error) {
		return rawSession(t, addr, wire.OpRail, "", a.Encode())
	}
	t.Run("rail of no session", func(t *testing.T) {
		a := wire.RailAttach{Generation: s.genRaw}
		if _, _, err := attach(a); !errdefs.IsNotFound(err) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("rail of another generation", func(t *testing.T) {
		if _, _, err := attach(wire.RailAttach{}); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "restarted") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("ranges", func(t *testing.T) {
		r, c := open(t)
		c.Write([]byte{1, 200}) // tcp, 200 rails
		a, err := wire.ReadTransportAnswer(r, 200)
		if err != nil {
			t.Fatal(err)
		}
		cs := &clientSession{addr: addr, conn: c, r: r, rails: len(a.Endpoints), secret: a.Secret}
		if cs.rails != DefaultMaxRails {
			t.Fatalf("%d rails granted, want the cap %d", cs.rails, DefaultMaxRails)
		}
		for _, q := range []wire.RangeRequest{{Shard: 7}, {Shard: 0, Off: 1 << 40}, {Shard: 0, Off: 1, N: ^uint64(0)}} {
			rr, rc, err := attach(wire.RailAttach{Secret: cs.secret, Generation: s.genRaw, Rail: 3})
			if err != nil {
				t.Fatal(err)
			}
			rc.Write(q.Encode())
			if err := wire.ReadStatus(rr, "range"); !errdefs.IsInvalidArgument(err) {
				t.Fatalf("range %+v: got %v", q, err)
			}
		}
		if _, _, err := attach(wire.RailAttach{Secret: cs.secret, Generation: s.genRaw, Rail: DefaultMaxRails}); !errdefs.IsNotFound(err) {
			t.Fatalf("rail past the count: got %v", err)
		}
	})
}

// TestSessionLimit: sessions over the limit are answered busy; the fetch
// of a busy peer moves on and fails retryably.
func TestSessionLimit(t *testing.T) {
	d, id := storetest.Seeded(t, 2<<20, 1)
	_, addr := serve(t, d, ServerConfig{MaxSessions: 1})
	if _, _, err := rawSession(t, addr, wire.OpFetch, "", wire.Enc{}.Blob32([]byte(digestOf(t, id)))); err != nil {
		t.Fatal(err)
	}
	_, _, err := rawSession(t, addr, wire.OpFetch, "", wire.Enc{}.Blob32([]byte(digestOf(t, id))))
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("second session: %v", err)
	}
}

// fakePeer answers every connection with answer after reading the hello
// and the request.
func fakePeer(t *testing.T, answer []byte) string {
	return acceptEach(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		if _, err := wire.ReadHello(r); err != nil {
			return
		}
		if _, err := wire.ReadRequest(r); err != nil {
			return
		}
		c.Write(answer)
	})
}

// acceptEach listens on a loopback port until the test ends and hands
// every connection to handle, on a goroutine of its own, closing it after.
func acceptEach(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l.Addr().String()
}

// TestClientRefuses: a truncated, oversized or wrong manifest from a peer
// is refused with a typed error, and nothing over the limit is allocated.
func TestClientRefuses(t *testing.T) {
	d, id := storetest.Seeded(t, 1<<20, 1)
	good := manifestDoc(t, d, id)
	// edited is good with one change made to its first safetensors shard.
	edited := func(change func(s *wire.WeightShard)) []byte {
		var m wire.WeightManifest
		json.Unmarshal(good, &m)
		for i := range m.Shards {
			if artifact.IsSafetensors(m.Shards[i].Path) {
				change(&m.Shards[i])
				break
			}
		}
		raw, _ := json.Marshal(&m)
		return raw
	}
	collision := edited(func(s *wire.WeightShard) { s.SHA256 = strings.Repeat("5", 64) })
	otherHeader := edited(func(s *wire.WeightShard) { s.Header[len(s.Header)-1] ^= 1 })
	noHeader := edited(func(s *wire.WeightShard) { s.Header = nil })
	for _, tc := range []struct {
		name   string
		answer []byte
		want   func(error) bool
	}{
		{"oversized manifest", wire.Enc{wire.StatusOK}.U32(0xffffffff), isTooLarge},
		{"manifest over the client's bound", wire.Enc{wire.StatusOK}.U32(wire.DefaultManifestMax + 1), isTooLarge},
		{"truncated manifest", wire.Enc{wire.StatusOK}.U32(uint32(len(good))).Raw(good[:len(good)/2]), isProtocol},
		{"truncated status", nil, isProtocol},
		{"unknown status", wire.Enc{200}, isProtocol},
		{"oversized message", wire.Enc{wire.StatusInternal}.U32(wire.MessageMax + 1), isTooLarge},
		{"manifest with trailing data", wire.Enc{wire.StatusOK}.Blob32(append(good, '{', '}')), isProtocol},
		{"shards that are not the passthrough fingerprint", wire.Enc{wire.StatusOK}.Blob32(collision), errdefs.IsConflict},
		{"header bytes that are not the header BLAKE3's", wire.Enc{wire.StatusOK}.Blob32(otherHeader), isProtocol},
		{"a safetensors shard without its header bytes", wire.Enc{wire.StatusOK}.Blob32(noHeader), isProtocol},
		{"manifest with a wrong identity digest", wire.Enc{wire.StatusOK}.Blob32(bytes.Replace(good, []byte(`"identity_digest":"sha256:`), []byte(`"identity_digest":"sha256:0`), 1)), isProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakePeer(t, tc.answer)
			var err error
			n := allocated(func() {
				_, _, err = Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, id), FetchOptions{Client: ClientConfig{Timeout: 5 * time.Second}})
			})
			if err == nil || !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			if n > 8<<20 {
				t.Fatalf("the refusal allocated %d bytes", n)
			}
		})
	}
}

// TestClientRefusesAnotherArtifact: a valid manifest of another artifact
// than the one asked for is refused.
func TestClientRefusesAnotherArtifact(t *testing.T) {
	d, id := storetest.Seeded(t, 1<<20, 1)
	addr := fakePeer(t, wire.Enc{wire.StatusOK}.Blob32(manifestDoc(t, d, id)))
	_, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, "sha256:"+strings.Repeat("ab", 32), FetchOptions{})
	if err == nil || !strings.Contains(err.Error(), "answers another request") {
		t.Fatalf("got %v", err)
	}
}

// manifestDoc is the manifest a server of d sends for id.
func manifestDoc(t *testing.T, d *store.Domain, id artifact.Identity) []byte {
	t.Helper()
	l, err := d.Lookup(context.Background(), mustID(t, id), "")
	if err != nil {
		t.Fatal(err)
	}
	sv, err := servableFromLease(l)
	if err != nil {
		t.Fatal(err)
	}
	defer sv.release()
	m := sv.manifest
	m.Generation = strings.Repeat("0", 32)
	raw, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustID(t *testing.T, id artifact.Identity) artifact.ID {
	t.Helper()
	h, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// isTooLarge says err is a wire length over its bound: bad input, naming the limit.
func isTooLarge(err error) bool {
	return errdefs.IsInvalidArgument(err) && strings.Contains(err.Error(), "is over the limit of")
}

// isProtocol says err is another break of the wire format: bad input from the protocol.
func isProtocol(err error) bool {
	return errdefs.IsInvalidArgument(err) && strings.Contains(err.Error(), "peer protocol: ") && !isTooLarge(err)
}
