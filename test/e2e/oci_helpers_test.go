package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Helpers of the OCI end-to-end tests (oci_test.go): the weightsnap CLI,
// the oras CLI, and a blob proxy in front of the registry.

var ociCLI struct {
	once sync.Once
	path string
	err  error
}

// weightsnapBin builds ./cmd/weightsnap once per test process, into a fixed
// directory under the system temp dir (overwritten by the next run).
func weightsnapBin(t *testing.T) string {
	t.Helper()
	ociCLI.once.Do(func() {
		root, err := harness.ModuleRoot()
		if err != nil {
			ociCLI.err = err
			return
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), "weightsnap-e2e-cli-"+hex.EncodeToString(sum[:4]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			ociCLI.err = err
			return
		}
		out, err := harness.Run(root, "go", "build", "-o", dir+"/", "./cmd/weightsnap")
		if err != nil {
			ociCLI.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		ociCLI.path = filepath.Join(dir, "weightsnap")
	})
	if ociCLI.err != nil {
		t.Fatalf("build the weightsnap CLI: %v", ociCLI.err)
	}
	return ociCLI.path
}

// rmaCLI is the weightsnap CLI built with the rma plane (build tag libfabric).
var rmaCLI struct {
	once sync.Once
	path string
	err  error
}

// weightsnapRMABin builds the CLI with the rma plane once per test binary.
// libfabric's development files come with test/e2e/deps; without them the
// test skips (see testenv.Skip: fatal where WEIGHTSNAP_REQUIRE_ALL=1).
func weightsnapRMABin(t *testing.T) string {
	t.Helper()
	if _, err := harness.Run("", "pkg-config", "--exists", "libfabric"); err != nil {
		testenv.Skip(t, "libfabric-dev missing (test/e2e/deps installs it): cannot build the rma plane")
	}
	rmaCLI.once.Do(func() {
		root, err := harness.ModuleRoot()
		if err != nil {
			rmaCLI.err = err
			return
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), "weightsnap-e2e-cli-rma-"+hex.EncodeToString(sum[:4]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			rmaCLI.err = err
			return
		}
		out, err := harness.Run(root, "go", "build", "-tags", "libfabric", "-o", dir+"/", "./cmd/weightsnap")
		if err != nil {
			rmaCLI.err = fmt.Errorf("go build -tags libfabric: %v\n%s", err, out)
			return
		}
		rmaCLI.path = filepath.Join(dir, "weightsnap")
	})
	if rmaCLI.err != nil {
		t.Fatalf("build the weightsnap CLI with the rma plane: %v", rmaCLI.err)
	}
	return rmaCLI.path
}

// wsTimeout bounds one CLI run.
var wsTimeout = 3 * time.Minute

// wsResult is one CLI run.
type wsResult struct {
	out, errOut string
	code        int
}

// ws runs the CLI with the store at root; it fails the test on a run error
// other than a non-zero exit.
func ws(t *testing.T, root string, args ...string) wsResult {
	t.Helper()
	return runWS(t, nil, append([]string{"--root", root, "--config", ""}, args...))
}

// wsWith runs the weightsnap CLI with a configuration file (a daemon's:
// its store root and control socket).
func wsWith(t *testing.T, config string, args ...string) wsResult {
	t.Helper()
	return runWS(t, nil, append([]string{"--config", config}, args...))
}

// runWS runs the weightsnap CLI with an empty Docker config, or the
// variables of env over it.
func runWS(t *testing.T, env []string, argv []string) wsResult {
	t.Helper()
	return runWSIn(t, nil, env, argv)
}

// runWSIn is runWS in a network namespace (harness.NS.Enter), or in this
// process's when ns is nil.
func runWSIn(t *testing.T, ns *harness.NS, env []string, argv []string) wsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsTimeout)
	defer cancel()
	argv = append([]string{weightsnapBin(t)}, argv...)
	if ns != nil {
		argv = ns.Enter(argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) } // a goroutine dump on timeout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}       // never outlive the test
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(append(os.Environ(), "DOCKER_CONFIG="+t.TempDir()), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	res := wsResult{out: out.String(), errOut: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("weightsnap %v: %v", argv, err)
	}
	return res
}

// wsOK is ws that fails the test on a non-zero exit and returns stdout.
func wsOK(t *testing.T, root string, args ...string) string {
	t.Helper()
	r := ws(t, root, args...)
	if r.code != 0 {
		t.Fatalf("weightsnap %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	}
	return r.out
}

// ociCheckpoint synthesises a checkpoint (synth are more dev synth flags,
// such as --seed) and imports it into a new store.
func ociCheckpoint(t *testing.T, size string, shards int, synth ...string) (dir, root, id string) {
	t.Helper()
	base := t.TempDir()
	dir, root = filepath.Join(base, "ckpt"), filepath.Join(base, "store")
	wsOK(t, root, append([]string{"dev", "synth", "--out", dir, "--size", size, "--shards", fmt.Sprint(shards)}, synth...)...)
	id = strings.TrimSpace(wsOK(t, root, "import", dir, "--revision", storetest.Revision, "--repository", "org/tiny"))
	return dir, root, id
}

// orasRun runs the oras CLI in dir.
func orasRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := harness.Run(dir, append([]string{harness.Peers(t).Oras}, args...)...)
	if err != nil {
		t.Fatalf("oras %v: %v", args, err)
	}
	return out
}

func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	ents, err := os.ReadDir(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		a, err := os.ReadFile(filepath.Join(want, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil {
			t.Fatalf("%s missing from the pulled files: %v", e.Name(), err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: pulled bytes differ from the source", e.Name())
		}
	}
}

// blobProxy is a reverse proxy in front of the registry that counts blob
// bytes served, and can stall after a number of bytes or flip a byte.
type blobProxy struct {
	srv     *httptest.Server
	served  atomic.Int64
	stallAt atomic.Int64 // stall blob bodies once served reaches this (0: never)
	stalled chan struct{}
	once    sync.Once
	corrupt atomic.Pointer[string] // digest whose bodies get byte 100 flipped

	// A shaped link: blob bodies at most rate bytes a second, all together
	// (0: as fast as the registry sends); reached is closed once served
	// passes reachAt.
	rate    atomic.Int64
	reachAt atomic.Int64
	reached chan struct{}
	reachMu sync.Once
	paceMu  sync.Mutex
	paced   time.Time // when the bytes served so far may all have gone, at rate
	whole   sync.Map  // "sha256:<hex>" of each blob served whole (a 200 to its end)
}

func newBlobProxy(t *testing.T, reg *harness.Registry) *blobProxy {
	u, _ := url.Parse(reg.URL)
	p := &blobProxy{stalled: make(chan struct{}), reached: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		path := resp.Request.URL.Path
		if resp.Request.Method != http.MethodGet || !strings.Contains(path, "/blobs/sha256:") {
			return nil
		}
		body := &proxyBody{rc: resp.Body, p: p, ctx: resp.Request.Context()}
		if resp.StatusCode == http.StatusOK {
			body.digest = path[strings.LastIndex(path, "/")+1:]
		}
		if c := p.corrupt.Load(); c != nil && strings.HasSuffix(path, *c) {
			body.flipAt = 100
		} else {
			body.flipAt = -1
		}
		resp.Body = body
		return nil
	}
	rp.FlushInterval = -1
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *blobProxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

type proxyBody struct {
	ctx    context.Context // ends when the client goes away
	rc     io.ReadCloser
	p      *blobProxy
	pos    int64
	flipAt int64
	digest string // of a whole blob, recorded in p.whole at its end
}

func (b *proxyBody) Read(q []byte) (int, error) {
	if at := b.p.stallAt.Load(); at > 0 && b.p.served.Load() >= at {
		b.p.once.Do(func() { close(b.p.stalled) })
		<-b.ctx.Done() // hold the connection until the client dies
		return 0, b.ctx.Err()
	}
	if len(q) > 64<<10 {
		q = q[:64<<10]
	}
	n, err := b.rc.Read(q)
	if b.flipAt >= b.pos && b.flipAt < b.pos+int64(n) {
		q[b.flipAt-b.pos] ^= 0xff
	}
	b.pos += int64(n)
	served := b.p.served.Add(int64(n))
	if at := b.p.reachAt.Load(); at > 0 && served >= at {
		b.p.reachMu.Do(func() { close(b.p.reached) })
	}
	b.p.pace(n)
	if err == io.EOF && b.digest != "" {
		b.p.whole.Store(b.digest, true)
	}
	return n, err
}

// pace holds a body's read until n more bytes fit the link's rate.
func (p *blobProxy) pace(n int) {
	rate := p.rate.Load()
	if rate <= 0 || n == 0 {
		return
	}
	p.paceMu.Lock()
	now := time.Now()
	if p.paced.Before(now) {
		p.paced = now
	}
	p.paced = p.paced.Add(time.Duration(int64(n) * int64(time.Second) / rate))
	until := p.paced
	p.paceMu.Unlock()
	time.Sleep(time.Until(until))
}

func (b *proxyBody) Close() error { return b.rc.Close() }

// landed waits until every file of the checkpoint dir that p served whole
// is in a temp build of the store at root with all its bytes: the store's
// writer is pipelined, so what it was handed lands a moment later.
func (p *blobProxy) landed(t *testing.T, dir, root string) {
	t.Helper()
	byDigest := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		byDigest[digest.FromBytes(raw).String()] = e.Name()
	}
	if err := testenv.Wait(30*time.Second, func() error {
		n := 0
		var missing []string
		p.whole.Range(func(k, _ any) bool {
			name, ok := byDigest[k.(string)]
			if !ok {
				return true // not a payload file (the config, the index)
			}
			n++
			want, _ := os.ReadFile(filepath.Join(dir, name))
			got, _ := filepath.Glob(filepath.Join(root, "tmp", "*", name))
			if len(got) != 1 {
				missing = append(missing, name)
				return true
			}
			if b, _ := os.ReadFile(got[0]); !bytes.Equal(b, want) {
				missing = append(missing, name)
			}
			return true
		})
		if n == 0 {
			return testenv.Final(errors.New("no payload file was served whole"))
		}
		if len(missing) > 0 {
			return fmt.Errorf("%v of the %d files served whole not written yet", missing, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

type pullReport struct {
	Identity    string `json:"identity"`
	Built       bool   `json:"built"`
	Bytes       int64  `json:"bytes"`
	Fetched     int64  `json:"fetched_bytes"`
	Reused      int64  `json:"reused_bytes"`
	ReusedFiles int    `json:"reused_files"`
	Resumed     int    `json:"resumed_files"`
	Ranged      bool   `json:"ranged"`
}
