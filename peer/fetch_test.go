package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

func TestFetchTCP(t *testing.T) {
	src, id := storetest.Seeded(t, 48<<20, 3)
	srv, addr := serve(t, src, ServerConfig{})
	for _, rails := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(rails), func(t *testing.T) {
			waitSessionsEnd(t, srv, mustID(t, id)) // the last subtest's
			dst := storetest.Open(t)
			l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Rails: rails})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if !rep.Built || rep.Rails != rails || rep.Mode != string(ModeTCP) || rep.Endpoint != addr || rep.Fetched != rep.Bytes {
				t.Fatalf("report %+v", rep)
			}
			verifyFull(t, dst, l.ID)
		})
	}
}

// midSize is the artifact size of the tests that stop a peer once a third
// is verified: large enough that bytes are still unread then. A rail reads
// at most three rma batches past what it has verified (one being hashed,
// one queued, one just read), so two rails may have read the verified
// third plus 2 × 48 MiB: 160 of 192 MiB.
const midSize = 192 << 20

// killAt returns a progress function that runs kill once, when the fetch
// has verified more than at bytes; the fetch waits for it.
func killAt(at int64, kill func()) func(int64) {
	var n atomic.Int64
	var once sync.Once
	return func(k int64) {
		if n.Add(k) > at {
			once.Do(kill)
		}
	}
}

// testFailover: the peer serving a fetch stops mid-transfer; the fetch
// resumes from the second peer with what it has not verified and ends
// READY and valid.
func testFailover(t *testing.T, mode Mode, cfg ServerConfig) {
	const size = midSize
	a, id := storetest.Seeded(t, size, 4)
	b, _ := storetest.Seeded(t, size, 4)
	la, _ := net.Listen("tcp", "127.0.0.1:0")
	_, stopA := serveStoppable(t, a, cfg, la)
	_, addrB := serve(t, b, cfg)
	dst := storetest.Open(t)
	l, rep, err := Fetch(context.Background(), dst, []string{la.Addr().String(), addrB}, digestOf(t, id),
		FetchOptions{Mode: mode, Rails: 2, Progress: killAt(size/3, stopA)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rep.Failovers < 1 || len(rep.Peers) != 2 || rep.Endpoint != addrB || rep.Fetched != rep.Bytes {
		t.Fatalf("report %+v", rep)
	}
	verifyFull(t, dst, l.ID)
}

// testRestart: the only peer restarts mid-transfer; the fetch notices the
// new generation, uses nothing of the old session but the verified bytes,
// and ends READY and valid.
func testRestart(t *testing.T, mode Mode, cfg ServerConfig) {
	const size = midSize
	d, id := storetest.Seeded(t, size, 4)
	l1, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l1.Addr().String()
	first, stop := serveStoppable(t, d, cfg, l1)
	var second atomic.Pointer[Server]
	restart := func() {
		stop()
		l2, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		second.Store(serveOn(t, d, cfg, l2))
	}
	dst := storetest.Open(t)
	l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id),
		FetchOptions{Mode: mode, Rails: 2, Progress: killAt(size/3, restart)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rep.Restarts != 1 || rep.Failovers < 1 || second.Load() == nil || second.Load().Generation() == first.Generation() {
		t.Fatalf("report %+v", rep)
	}
	verifyFull(t, dst, l.ID)
}

func TestFailoverTCP(t *testing.T) { testFailover(t, ModeTCP, ServerConfig{}) }
func TestRestartTCP(t *testing.T)  { testRestart(t, ModeTCP, ServerConfig{}) }

// TestFetchExportAndList: an exported directory is served as a
// passthrough artifact of its revision, mapped once, and listed.
func TestFetchExportAndList(t *testing.T) {
	dir, src := storetest.Checkpoint(t, 8<<20, 2)
	s, addr := serve(t, storetest.Open(t), ServerConfig{Exports: []Export{{Name: "ck", Path: dir, Revision: storetest.Revision, Repository: "org/model"}}})
	ls, err := (ClientConfig{}).List(context.Background(), addr)
	if err != nil || ls.Generation != s.Generation() || len(ls.Exports) != 1 || ls.Exports[0].Mapped {
		t.Fatalf("list %+v %v", ls, err)
	}
	dst := storetest.Open(t)
	l, rep, err := Fetch(context.Background(), dst, []string{addr}, "staged:ck", FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if want := digestOf(t, storetest.Identity(src)); rep.ID.String() != want {
		t.Fatalf("staged identity %s, want the passthrough identity %s", rep.ID, want)
	}
	verifyFull(t, dst, l.ID)
	if ls, _ = (ClientConfig{}).List(context.Background(), addr); !ls.Exports[0].Mapped || ls.Exports[0].Bytes != rep.Bytes {
		t.Fatalf("after the fetch: %+v", ls.Exports)
	}
}

// TestFetchSubset: only the matching tensors are fetched, into an artifact
// of their own whose tensors are byte for byte the source's.
func TestFetchSubset(t *testing.T) {
	src, id := storetest.Seeded(t, 8<<20, 2)
	_, addr := serve(t, src, ServerConfig{})
	dst := storetest.Open(t)
	patterns := []string{"model.layers.1.*", "lm_head.weight"}
	l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Tensors: patterns})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want, _ := producers.SubsetIdentity(id, patterns)
	if rep.ID.String() != digestOf(t, want) || l.Identity().Producer.Name != producers.TensorSubsetName {
		t.Fatalf("subset identity %s", rep.ID)
	}
	verifyFull(t, dst, l.ID)
	sl, err := src.Lookup(context.Background(), mustID(t, id), "")
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	n := 0
	for _, f := range l.Index.Files {
		for _, x := range f.Tensors {
			got, _, _ := l.Tensor(x.Name)
			ref, _, err := sl.Tensor(x.Name)
			if err != nil || !bytes.Equal(got, ref) {
				t.Fatalf("tensor %s differs from the source", x.Name)
			}
			if x.Name != "lm_head.weight" && !strings.HasPrefix(x.Name, "model.layers.1.") {
				t.Fatalf("tensor %s does not match", x.Name)
			}
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d tensors in the subset, want 10", n)
	}
	for _, f := range l.Files() {
		if !artifact.IsSafetensors(f.Entry.Path) {
			continue
		}
		if h, err := artifact.ReadHeader(f.File, f.Entry.Size); err != nil || h.Metadata["format"] != "pt" || len(h.Metadata) != 1 {
			t.Fatalf("%s: the source's __metadata__ {format: pt} not kept: %v, %v", f.Entry.Path, h, err)
		}
	}
	if _, _, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Tensors: []string{"nothing.*"}}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a pattern matching nothing: %v", err)
	}
}

// TestFetchResumesKeptFiles: a fetch cancelled part way keeps what it
// wrote; the next fetch reuses the files it completed.
func TestFetchResumesKeptFiles(t *testing.T) {
	const size = 64 << 20
	src, id := storetest.Seeded(t, size, 4)
	srv, addr := serve(t, src, ServerConfig{})
	dst := storetest.Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err := Fetch(ctx, dst, []string{addr}, digestOf(t, id), FetchOptions{Rails: 1, Progress: killAt(size*3/4, cancel)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	waitSessionsEnd(t, srv, mustID(t, id))
	l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rep.Reused == 0 || rep.Reused+rep.Fetched != rep.Bytes {
		t.Fatalf("report %+v", rep)
	}
	verifyFull(t, dst, l.ID)
}

// TestFetchFromALyingPeer: a peer whose bytes do not hash to its own
// manifest is caught on arrival; the fetch takes that tensor from the next
// peer and publishes valid bytes.
func TestFetchFromALyingPeer(t *testing.T) {
	a, id := storetest.Seeded(t, 8<<20, 2)
	b, _ := storetest.Seeded(t, 8<<20, 2)
	l, err := a.Lookup(context.Background(), mustID(t, id), "")
	if err != nil {
		t.Fatal(err)
	}
	var lf *store.LeaseFile
	for _, f := range l.Files() {
		if len(f.Entry.Tensors) > 0 {
			lf = f
		}
	}
	victim := lf.Entry.Tensors[len(lf.Entry.Tensors)-1]
	l.Close()
	os.Chmod(lf.Abs, 0o644)
	f, err := os.OpenFile(lf.Abs, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0x00, 0xff}, victim.Offset)
	f.Close()
	os.Chmod(lf.Abs, 0o444)
	_, addrA := serve(t, a, ServerConfig{})
	_, addrB := serve(t, b, ServerConfig{})
	dst := storetest.Open(t)
	got, rep, err := Fetch(context.Background(), dst, []string{addrA, addrB}, digestOf(t, id), FetchOptions{Rails: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if rep.Failovers < 1 || rep.Endpoint != addrB {
		t.Fatalf("report %+v", rep)
	}
	verifyFull(t, dst, got.ID)
}

// TestExpandPeers: static addresses keep their order, get the default port
// and lose repeats; a DNS name stands for every address it has.
func TestExpandPeers(t *testing.T) {
	got, err := ExpandPeers(context.Background(), []string{"10.0.0.1", "10.0.0.2:9000,10.0.0.1:7420", "[fd00::1]", "localhost:7000"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:7420", "10.0.0.2:9000", "[fd00::1]:7420"}
	if len(got) < len(want)+1 || !slices.Equal(got[:3], want) || !slices.Contains(got, "127.0.0.1:7000") {
		t.Fatalf("expanded %v", got)
	}
	for _, bad := range [][]string{{"10.0.0.1:0"}, {"10.0.0.1:http"}, {""}} {
		if _, err := ExpandPeers(context.Background(), bad); err == nil {
			t.Errorf("%q expanded", bad)
		}
	}
}

// recordingListener records the local address of every connection it accepts.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	local map[string]int
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		host, _, _ := net.SplitHostPort(c.LocalAddr().String())
		l.mu.Lock()
		l.local[host]++
		l.mu.Unlock()
	}
	return c, err
}

// TestRailAddrs: with rail addresses (one per NIC), rail r is served on
// address r modulo their count.
func TestRailAddrs(t *testing.T) {
	d, id := storetest.Seeded(t, 8<<20, 2)
	inner, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &recordingListener{Listener: inner, local: map[string]int{}}
	serveOn(t, d, ServerConfig{RailAddrs: []string{"127.0.0.2", "127.0.0.3"}}, l)
	addr := fmt.Sprintf("127.0.0.1:%d", inner.Addr().(*net.TCPAddr).Port)
	got, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, id), FetchOptions{Rails: 4})
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local["127.0.0.2"] != 2 || l.local["127.0.0.3"] != 2 || l.local["127.0.0.1"] != 1 {
		t.Fatalf("connections by local address: %v", l.local)
	}
	if _, err := NewServer(d, ServerConfig{RailAddrs: []string{"eth0"}}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a rail address that is no IP: %v", err)
	}
}
