package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// standinReady is the stand-in engine's ready line (test/e2e/standin).
type standinReady struct {
	Ready          bool    `json:"ready"`
	Cache          string  `json:"cache"`
	Tensors        int     `json:"tensors"`
	ModelBytes     int64   `json:"model_bytes"`
	Seconds        float64 `json:"seconds"`
	CompileSeconds float64 `json:"compile_seconds"`
	Key            string  `json:"key"`
}

// buildStandin builds the stand-in engine, static (it runs in busybox too).
func buildStandin(t *testing.T) string {
	t.Helper()
	dir := harness.TempDir(t)
	bin := filepath.Join(dir, "standin")
	cmd := exec.Command("go", "build", "-o", bin, "./standin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./standin: %v\n%s", err, out)
	}
	return dir
}

func parseReady(t *testing.T, out string) standinReady {
	t.Helper()
	var r standinReady
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, `{"ready"`) {
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("the stand-in engine never said ready:\n%s", out)
	return r
}

// storeMetadata are the files of a store's artifact directory that are not
// its payload (READY.json has its own time).
var storeMetadata = map[string]bool{"READY.json": true, "manifest.json": true, "index.json": true}

// fileSums is every regular file below dir with its sha256 (a view's
// pointer directory and a store's metadata left out).
func fileSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == ".weightsnap" {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(dir, p)
		if e.Type().IsRegular() && !storeMetadata[rel] {
			out[rel] = harness.FileSHA256(t, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSums(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// cacheNode is a node of TestCompileCacheRoundTrip: a network namespace
// and its weightsnapd; the CLI runs in the namespace's network.
type cacheNode struct {
	ns *harness.NS
	d  *harness.Weightsnapd
}

// ok runs the CLI on root with no configuration and returns its stdout; a
// non-zero exit fails the test.
func (n cacheNode) ok(t *testing.T, root string, args ...string) string {
	t.Helper()
	r := runWSIn(t, n.ns, nil, append([]string{"--root", root, "--config", ""}, args...))
	if r.code != 0 {
		t.Fatalf("weightsnap %s in %s: exit %d\n%s%s", strings.Join(args, " "), n.ns.Name, r.code, r.out, r.errOut)
	}
	return r.out
}

// with runs the CLI with the daemon's configuration (its store and control socket).
func (n cacheNode) with(t *testing.T, args ...string) wsResult {
	t.Helper()
	return runWSIn(t, n.ns, nil, append([]string{"--config", n.d.Config}, args...))
}

// TestCompileCacheRoundTrip: a stand-in engine
// loads its model by repo id from a hub cache view and compiles for about
// 2 s at its first start, on node A; the cache it wrote is published
// there (a publication that fails, disallowed through the daemon or for
// weights the store lacks, leaves the running engine and its cache as they
// were). Node B, another network namespace with its own daemon, store,
// registry and containerd, joined to A by a veth pair, computes the
// cache's ID from the same keys, fetches it from A's weight peer across
// the link, mounts it writable where the engine expects it, and the engine
// is ready without compiling; its writes leave the store's files
// unchanged. Prefetch brings the cache from the registry (A pushed it
// across the link) too. A weight image with the cache (pulled from the
// registry into B's store by the snapshotter) gives a container the cache
// in its rootfs, writable through the container's layer, with the same
// result. Each node's processes run in its namespace's network and the
// host's mounts (harness.NS.Enter).
func TestCompileCacheRoundTrip(t *testing.T) {
	standin := buildStandin(t)
	engine := filepath.Join(standin, "standin")
	nsA, nsB := harness.NetNS(t, "cca"), harness.NetNS(t, "ccb")
	harness.Link(t, nsA, nsB, "10.233.35.1/24", "10.233.35.2/24")
	const peerAddr = "10.233.35.1:7420"

	// Node B: registry, weightsnapd, containerd with the contrib snippet.
	regData := harness.TempDir(t)
	b := &snapNode{reg: harness.StartRegistryIn(t, nsB, "10.233.35.2:5000", regData)}
	b.ws = harness.StartWeightsnapd(t, harness.WeightsnapdOptions{NetNS: nsB, Registries: []string{b.reg.Host}})
	b.ctd = harness.StartContainerd(t, harness.ContainerdOptions{NetNS: nsB, Registry: b.reg, Imports: []string{b.ws.ContainerdSnippet(t)}})
	b.base = b.reg.Ref("busybox:latest")
	harness.PushBusyboxIn(t, nsB, b.base)
	nodeB := cacheNode{ns: nsB, d: b.ws}
	// Node A: a daemon whose weight peer serves on the link (a private
	// one: no token).
	a := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{NetNS: nsA, Registries: []string{b.reg.Host},
		ExtraConfig: fmt.Sprintf("[peer]\nserve = true\nlisten = %q\nallow_unauthenticated = true\n", peerAddr)})
	nodeA := cacheNode{ns: nsA, d: a}

	// Node A: the model, its hub view, the engine's first start.
	work := harness.TempDir(t)
	src := filepath.Join(work, "ckpt")
	nodeA.ok(t, a.Root, "dev", "synth", "--out", src, "--size", "4MiB", "--shards", "2")
	model := strings.TrimSpace(nodeA.ok(t, a.Root, "import", src, "--revision", storetest.Revision, "--repository", "org/standin"))
	hubA := filepath.Join(work, "hub-a")
	if r := nodeA.with(t, "mount", "--layout", "hf", model, hubA); r.code != 0 {
		t.Fatalf("mount --layout hf on A: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { nodeA.with(t, "umount", filepath.Join(hubA, "models--org--standin")) })
	cacheA := filepath.Join(work, "cache-a")
	engineEnv := func(hub string) []string {
		return append(os.Environ(), "HF_HUB_CACHE="+hub, "HF_HUB_OFFLINE=1")
	}
	first := harness.StartProcess(t, work, "standin-a", engineEnv(hubA), nsA.Enter(engine, "-repo", "org/standin", "-cache", cacheA, "-serve")...)
	var firstReady standinReady
	testenv.Eventually(t, 2*time.Minute, func() bool {
		raw, _ := os.ReadFile(first.Log)
		if first.Exited() {
			t.Fatalf("the engine's first start exited: %v\n%s", first.Err(), raw)
		}
		if !strings.Contains(string(raw), `{"ready"`) {
			return false
		}
		firstReady = parseReady(t, string(raw))
		return true
	}, "the engine's first start never got ready")
	if firstReady.Cache != "compiled" || firstReady.Tensors == 0 {
		t.Fatalf("first start: %+v, want a compile", firstReady)
	}
	keys := []string{"--kind", "compile-cache", "--for", model, "--engine", "standin", "--engine-version", "1", "--gpu-arch", "none", "--key", "flags=-O2"}
	cacheBefore := fileSums(t, cacheA)

	// Failed publications change nothing of the running engine's start.
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"disallowed through the daemon", append([]string{"publish", "--daemon", cacheA}, keys...), 1, "not allowed"},
		{"weights the store lacks", append([]string{"publish", cacheA}, append(keys, "--for", strings.Repeat("f", 64))...), 3, "--for"},
	} {
		r := nodeA.with(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.errOut, tc.says) {
			t.Fatalf("publish %s: exit %d, want %d saying %q\n%s%s", tc.name, r.code, tc.code, tc.says, r.out, r.errOut)
		}
		if first.Exited() || !sameSums(cacheBefore, fileSums(t, cacheA)) {
			t.Fatalf("a failed publish (%s) touched the engine's start (exited %v)", tc.name, first.Exited())
		}
		t.Logf("failed publish, %s: %s", tc.name, strings.TrimSpace(r.errOut))
	}
	var dry struct {
		ID      string `json:"id"`
		Present bool   `json:"present"`
	}
	if err := json.Unmarshal([]byte(nodeA.ok(t, a.Root, append([]string{"publish", "--dry-run", "--json"}, keys...)...)), &dry); err != nil || dry.Present {
		t.Fatalf("dry run after the failed publications: %+v %v", dry, err)
	}

	// The publication.
	var pub struct {
		ID      string          `json:"id"`
		Present bool            `json:"present"`
		Report  json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal([]byte(nodeA.ok(t, a.Root, append([]string{"publish", cacheA, "--json"}, keys...)...)), &pub); err != nil || !pub.Present || pub.ID != dry.ID {
		t.Fatalf("publish: %+v %v", pub, err)
	}
	if first.Exited() || !sameSums(cacheBefore, fileSums(t, cacheA)) {
		t.Fatal("the publication touched the running engine or its cache")
	}
	first.Stop()
	published := fileSums(t, filepath.Join(a.Root, "artifacts", strings.TrimPrefix(pub.ID, "sha256:")))
	cacheRef := b.reg.Ref("caches/standin:v1")
	nodeA.ok(t, a.Root, "push", "--plain-http", pub.ID, cacheRef)

	// Node B: the same ID from the same keys, once it has the weights.
	nodeB.ok(t, b.ws.Root, "peer", "fetch", peerAddr, model)
	var dryB struct {
		ID      string `json:"id"`
		Present bool   `json:"present"`
	}
	if err := json.Unmarshal([]byte(nodeB.ok(t, b.ws.Root, append([]string{"publish", "--dry-run", "--json"}, keys...)...)), &dryB); err != nil || dryB.ID != pub.ID || dryB.Present {
		t.Fatalf("node B computes %+v (%v), want %s, not present yet", dryB, err, pub.ID)
	}
	var fetch peerReport
	if err := json.Unmarshal([]byte(nodeB.ok(t, b.ws.Root, "peer", "fetch", "--json", peerAddr, dryB.ID)), &fetch); err != nil ||
		!fetch.Built || fetch.Identity != dryB.ID || fetch.Peer != peerAddr || fetch.Fetched != fetch.Bytes || fetch.Bytes == 0 {
		t.Fatalf("node B's fetch of the cache from A's peer: %+v %v", fetch, err)
	}
	hubB := filepath.Join(work, "hub-b")
	if r := nodeB.with(t, "mount", "--layout", "hf", model, hubB); r.code != 0 {
		t.Fatalf("mount --layout hf on B: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { nodeB.with(t, "umount", filepath.Join(hubB, "models--org--standin")) })
	cacheB := filepath.Join(work, "cache-b")
	if r := nodeB.with(t, "mount", "--writable", dryB.ID, cacheB); r.code != 0 {
		t.Fatalf("mount --writable on B: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { unix.Unmount(cacheB, unix.MNT_DETACH) })
	out, err := harness.RunEnv(engineEnv(hubB), work, nsB.Enter(engine, "-repo", "org/standin", "-cache", cacheB)...)
	if err != nil {
		t.Fatalf("the engine's second start: %v\n%s", err, out)
	}
	second := parseReady(t, out)
	if second.Cache != "hit" || second.Key != firstReady.Key {
		t.Fatalf("second start: %+v, want a cache hit on key %s", second, firstReady.Key)
	}
	log, _ := os.ReadFile(filepath.Join(cacheB, "standin", second.Key, "starts.log"))
	if strings.Count(string(log), "\n") != 2 {
		t.Fatalf("the engine's write into its writable cache: starts.log is %q", log)
	}
	storeB := filepath.Join(b.ws.Root, "artifacts", strings.TrimPrefix(dryB.ID, "sha256:"))
	if got := fileSums(t, storeB); !sameSums(got, published) {
		t.Fatalf("the engine's writes changed the store's files:\n%v\nwant %v", got, published)
	}
	nodeB.ok(t, b.ws.Root, "verify", "--full", dryB.ID)
	if r := nodeB.with(t, "umount", cacheB); r.code != 0 {
		t.Fatalf("umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if ents, _ := os.ReadDir(cacheB); len(ents) != 0 {
		t.Fatalf("the writable mount's writes outlive its umount: %d entries", len(ents))
	}

	// Prefetch brings it back from the registry (B's daemon has no peers),
	// as weightsnapd's prefetch directory would.
	nodeB.ok(t, b.ws.Root, "rm", dryB.ID)
	prefetchDir := filepath.Join(work, "prefetch")
	if err := os.MkdirAll(prefetchDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefetchDir, "cache.toml"), []byte(fmt.Sprintf("[[artifact]]\nref = %q\nidentity = %q\n", cacheRef, dryB.ID)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := nodeB.with(t, "prefetch", "sync", prefetchDir); r.code != 0 {
		t.Fatalf("prefetch sync of the cache: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if got := fileSums(t, storeB); !sameSums(got, published) {
		t.Fatalf("the prefetched cache holds %v, want %v", got, published)
	}

	// A weight image with the cache, from the registry: the container's
	// rootfs has it, writable through its own layer. B's store lost it
	// again: the snapshotter pulls it from the registry the pointer names
	// (storeB is read again below).
	nodeB.ok(t, b.ws.Root, "rm", dryB.ID)
	image := strings.TrimSpace(nodeB.ok(t, t.TempDir(), "image", "build", "--plain-http", "--base", b.base, "-t", b.reg.Ref("apps/standin:v1"),
		"--weights", cacheRef, "--at", "/root/.cache/standin"))
	out, err = b.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
		"-v", hubB+":/hub:ro", "-v", standin+":/standin:ro", "-e", "HF_HUB_CACHE=/hub", "-e", "HF_HUB_OFFLINE=1",
		image, "sh", "-c", "/standin/standin -repo org/standin -cache /root/.cache/standin && cat /root/.cache/standin/standin/*/starts.log")
	if err != nil {
		t.Fatalf("the engine in a container: %v\n%s", err, out)
	}
	inContainer := parseReady(t, out)
	if inContainer.Cache != "hit" || strings.Count(out, " hit\n") != 1 || strings.Count(out, " compiled\n") != 1 {
		t.Fatalf("the engine in a container: %+v, want a hit that it logged in its cache\n%s", inContainer, out)
	}
	if got := fileSums(t, storeB); !sameSums(got, published) {
		t.Fatalf("the container's writes changed the store's files:\n%v\nwant %v", got, published)
	}
	nodeB.ok(t, b.ws.Root, "verify", "--full", dryB.ID)

	t.Logf("time to ready: first start (compiles) %.3f s (compile %.3f s); second start on node B (cache of %d bytes fetched from A's peer across the link in %.3f s, mounted writable) %.3f s; in a container of a weight image %.3f s",
		firstReady.Seconds, firstReady.CompileSeconds, fetch.Bytes, fetch.Seconds, second.Seconds, inContainer.Seconds)
}
