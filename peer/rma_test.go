//go:build libfabric

package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// rmaConfig serves two sessions of one artifact at once: the tests close
// one session and open the next before the server has seen the first go.
var rmaConfig = ServerConfig{Provider: "sockets", MaxChildren: 2}

func TestFetchRMA(t *testing.T) {
	src, id := storetest.Seeded(t, 48<<20, 3)
	_, addr := serve(t, src, rmaConfig)
	for _, rails := range []int{1, 3} {
		t.Run(fmt.Sprint(rails), func(t *testing.T) {
			dst := storetest.Open(t)
			l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Mode: ModeRMA, Rails: rails})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if !rep.Built || rep.Mode != string(ModeRMA) || rep.Rails != rails || rep.Fetched != rep.Bytes {
				t.Fatalf("report %+v", rep)
			}
			verifyFull(t, dst, l.ID) // every byte against the sender's hashes
		})
	}
}

func TestFailoverRMA(t *testing.T) { testFailover(t, ModeRMA, rmaConfig) }
func TestRestartRMA(t *testing.T)  { testRestart(t, ModeRMA, rmaConfig) }

// rmaSession opens an rma session of one rail by hand and returns it with
// its endpoint and key table.
func rmaSession(t *testing.T, addr, request string) (*clientSession, *fabric.EP, [][]wire.RemoteKey) {
	t.Helper()
	cs, err := openSession(context.Background(), ClientConfig{}.withDefaults(), addr, request)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.startPlane(context.Background(), ModeRMA, 1); err != nil {
		t.Fatal(err)
	}
	e, err := wire.DecodeRMAEndpoint(cs.endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	ep, err := fabric.Connect(e.Provider, e.Host, e.Port, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := cs.readKeys(len(cs.manifest.Shards))
	if err != nil {
		t.Fatal(err)
	}
	return cs, ep, keys
}

// TestRMAKeys: a read with a wrong key fails cleanly (the peer keeps
// serving); keys of a finished session are useless in the next one.
func TestRMAKeys(t *testing.T) {
	src, id := storetest.Seeded(t, 4<<20, 1)
	_, addr := serve(t, src, rmaConfig)
	dst, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(dst)
	var cancel atomic.Int32
	read := func(ep *fabric.EP, k wire.RemoteKey) error {
		return ep.ReadBatch([]fabric.ReadOp{{Dst: dst, RAddr: k.Base, Key: k.Key}}, rmaChunk, rmaWindow, 5*time.Second, &cancel)
	}
	shard := func(cs *clientSession) int {
		for i, s := range cs.manifest.Shards {
			if s.Size >= 1<<20 {
				return i
			}
		}
		t.Fatal("no shard of 1 MiB")
		return 0
	}

	cs1, ep1, keys1 := rmaSession(t, addr, digestOf(t, id))
	i := shard(cs1)
	good := keys1[0][i]
	err = read(ep1, wire.RemoteKey{Base: good.Base, Key: good.Key ^ 1})
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "libfabric read") || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("wrong key: %v", err)
	}
	ep1.Close()
	cs1.close()

	cs2, ep2, keys2 := rmaSession(t, addr, digestOf(t, id))
	defer ep2.Close()
	if err := read(ep2, good); err == nil && keys2[0][i] != good {
		t.Fatal("a key of a finished session still reads")
	}
	if err := read(ep2, keys2[0][i]); err != nil {
		t.Fatalf("after a wrong key the peer no longer serves: %v", err)
	}
	if err := cs2.finish(); err != nil {
		t.Fatal(err)
	}
}

// procIO is /proc/PID/io: rchar counts bytes read by read(2), pread(2) and
// sendfile(2); read_bytes bytes fetched from storage.
func procIO(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		m[k], _ = strconv.ParseInt(v, 10, 64)
	}
	return m
}

// serveEnv names the store a helper process of
// TestRMAServerReadsNoPayload serves, instead of running the tests.
const serveEnv = "WEIGHTSNAP_PEER_TEST_SERVE"

func TestMain(m *testing.M) {
	if root := os.Getenv(serveEnv); root != "" {
		os.Exit(serveHelper(root))
	}
	os.Exit(m.Run())
}

// serveHelper serves the store at root on a loopback port it prints.
func serveHelper(root string) int {
	d, err := store.Open(context.Background(), root, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := NewServer(d, rmaConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(l.Addr().String())
	s.Serve(context.Background(), l)
	return 0
}

// TestRMAServerReadsNoPayload: while a client fetches over rma, the
// serving process reads no payload: its read syscalls (and sendfile, which
// counts as reads) move almost nothing, where a tcp fetch of the same
// artifact moves every byte through sendfile.
func TestRMAServerReadsNoPayload(t *testing.T) {
	const size = 64 << 20
	src, id := storetest.Seeded(t, size, 2)
	// The store drops what it wrote from the page cache; the server's
	// mapping would fault it in from storage however it served it. Cached
	// first, as on a seed that has served it before, the storage reads
	// count only what serving itself reads.
	cacheTree(t, src.Root())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serveEnv+"="+src.Root())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr = strings.TrimSpace(addr)
	moved := func(mode Mode) (rchar, readBytes int64) {
		before := procIO(t, cmd.Process.Pid)
		l, rep, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, id), FetchOptions{Mode: mode, Rails: 2})
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if rep.Fetched < size*9/10 {
			t.Fatalf("%s fetched %d bytes", mode, rep.Fetched)
		}
		after := procIO(t, cmd.Process.Pid)
		return after["rchar"] - before["rchar"], after["read_bytes"] - before["read_bytes"]
	}
	rchar, readBytes := moved(ModeRMA)
	t.Logf("rma: the server read %d bytes by syscalls, %d from storage", rchar, readBytes)
	if rchar > 1<<20 || readBytes > 1<<20 {
		t.Fatalf("the server read %d bytes (%d from storage) while serving %d over rma", rchar, readBytes, size)
	}
	if rchar, _ := moved(ModeTCP); rchar < size*9/10 {
		t.Fatalf("the tcp fetch shows only %d bytes read: the measure sees nothing", rchar)
	}
}

// cacheTree reads every file under root into the page cache.
func cacheTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRMAConnectBounded: a rail whose connect request is never answered
// fails the session within dialTimeout, not the longer read and write
// Timeout, so the fetch has time left for another session.
func TestRMAConnectBounded(t *testing.T) {
	l, port, err := fabric.Listen("sockets", "127.0.0.1") // never accepts
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cs := &clientSession{addr: "127.0.0.1:1", cfg: ClientConfig{Timeout: 2 * dialTimeout}, rails: 1,
		endpoints: [][]byte{wire.EncodeRMAEndpoint("sockets", "127.0.0.1", port)}}
	start := time.Now()
	err = (&fetcher{}).runRMA(context.Background(), cs, [][]*unit{nil})
	var pe *Error
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "connect sockets") {
		t.Fatalf("unanswered connect: %v", err)
	}
	if took := time.Since(start); took > dialTimeout+dialTimeout/2 {
		t.Fatalf("unanswered connect failed after %s, want about %s", took, dialTimeout)
	}
}

// TestRMAAcceptBounded: a session whose client never connects its rail
// gives up on it within dialTimeout, the client's own bound, not the longer
// read and write Timeout.
func TestRMAAcceptBounded(t *testing.T) {
	p, err := newRMAServePlane("sockets", &session{}, []string{"127.0.0.1"}, 2*dialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	start := time.Now()
	if _, err := p.ready(context.Background()); err == nil || !strings.Contains(err.Error(), "rail 0") {
		t.Fatalf("rail never connected: %v", err)
	}
	if took := time.Since(start); took > dialTimeout+dialTimeout/2 {
		t.Fatalf("unconnected rail given up after %s, want about %s", took, dialTimeout)
	}
}
