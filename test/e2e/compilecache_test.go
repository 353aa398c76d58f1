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

// TestCompileCacheRoundTrip (issue 35 items 3 and 4): a stand-in engine
// loads its model by repo id from a hub cache view and compiles for about
// 2 s at its first start, on node A; the cache it wrote is published
// there (a publication that fails, disallowed through the daemon or for
// weights the store lacks, leaves the running engine and its cache as they
// were). Node B, another daemon with its own store, computes the cache's
// ID from the same keys, fetches it from A's weight peer, mounts it
// writable where the engine expects it, and the engine is ready without
// compiling; its writes leave the store's files unchanged. Prefetch
// brings the cache from the registry too. A weight image with the cache (pulled from the registry into B's store by the
// snapshotter) gives a container the cache in its rootfs, writable through
// the container's layer, with the same result.
func TestCompileCacheRoundTrip(t *testing.T) {
	standin := buildStandin(t)
	engine := filepath.Join(standin, "standin")
	peerPort := harness.FreePort(t)
	peerAddr := fmt.Sprintf("127.0.0.1:%d", peerPort)
	b := startSnapNode(t) // node B: registry, weightsnapd, containerd
	a := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{Registries: []string{b.reg.Host},
		ExtraConfig: fmt.Sprintf("[peer]\nserve = true\nlisten = %q\n", peerAddr)})

	// Node A: the model, its hub view, the engine's first start.
	work := harness.TempDir(t)
	src := filepath.Join(work, "ckpt")
	wsOK(t, work, "dev", "synth", "--out", src, "--size", "4MiB", "--shards", "2")
	model := strings.TrimSpace(wsOK(t, a.Root, "import", src, "--revision", storetest.Revision, "--repository", "org/standin"))
	hubA := filepath.Join(work, "hub-a")
	if r := wsWith(t, a.Config, "mount", "--layout", "hf", model, hubA); r.code != 0 {
		t.Fatalf("mount --layout hf on A: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { wsWith(t, a.Config, "umount", filepath.Join(hubA, "models--org--standin")) })
	cacheA := filepath.Join(work, "cache-a")
	engineEnv := func(hub string) []string {
		return append(os.Environ(), "HF_HUB_CACHE="+hub, "HF_HUB_OFFLINE=1")
	}
	first := harness.StartProcess(t, work, "standin-a", engineEnv(hubA), engine, "-repo", "org/standin", "-cache", cacheA, "-serve")
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
		r := wsWith(t, a.Config, tc.args...)
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
	if err := json.Unmarshal([]byte(wsOK(t, a.Root, append([]string{"publish", "--dry-run", "--json"}, keys...)...)), &dry); err != nil || dry.Present {
		t.Fatalf("dry run after the failed publications: %+v %v", dry, err)
	}

	// The publication.
	var pub struct {
		ID      string          `json:"id"`
		Present bool            `json:"present"`
		Report  json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, a.Root, append([]string{"publish", cacheA, "--json"}, keys...)...)), &pub); err != nil || !pub.Present || pub.ID != dry.ID {
		t.Fatalf("publish: %+v %v", pub, err)
	}
	if first.Exited() || !sameSums(cacheBefore, fileSums(t, cacheA)) {
		t.Fatal("the publication touched the running engine or its cache")
	}
	first.Stop()
	published := fileSums(t, filepath.Join(a.Root, "artifacts", strings.TrimPrefix(pub.ID, "sha256:")))
	cacheRef := b.reg.Ref("caches/standin:v1")
	wsOK(t, a.Root, "push", "--plain-http", pub.ID, cacheRef)

	// Node B: the same ID from the same keys, once it has the weights.
	wsOK(t, b.ws.Root, "peer", "fetch", peerAddr, model)
	var dryB struct {
		ID      string `json:"id"`
		Present bool   `json:"present"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, b.ws.Root, append([]string{"publish", "--dry-run", "--json"}, keys...)...)), &dryB); err != nil || dryB.ID != pub.ID || dryB.Present {
		t.Fatalf("node B computes %+v (%v), want %s, not present yet", dryB, err, pub.ID)
	}
	fetched := time.Now()
	wsOK(t, b.ws.Root, "peer", "fetch", peerAddr, dryB.ID)
	fetchSeconds := time.Since(fetched).Seconds()
	hubB := filepath.Join(work, "hub-b")
	if r := wsWith(t, b.ws.Config, "mount", "--layout", "hf", model, hubB); r.code != 0 {
		t.Fatalf("mount --layout hf on B: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { wsWith(t, b.ws.Config, "umount", filepath.Join(hubB, "models--org--standin")) })
	cacheB := filepath.Join(work, "cache-b")
	if r := wsWith(t, b.ws.Config, "mount", "--writable", dryB.ID, cacheB); r.code != 0 {
		t.Fatalf("mount --writable on B: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	t.Cleanup(func() { unix.Unmount(cacheB, unix.MNT_DETACH) })
	out, err := harness.RunEnv(engineEnv(hubB), work, engine, "-repo", "org/standin", "-cache", cacheB)
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
	wsOK(t, b.ws.Root, "verify", "--full", dryB.ID)
	if r := wsWith(t, b.ws.Config, "umount", cacheB); r.code != 0 {
		t.Fatalf("umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if ents, _ := os.ReadDir(cacheB); len(ents) != 0 {
		t.Fatalf("the writable mount's writes outlive its umount: %d entries", len(ents))
	}

	// Prefetch brings it back from the registry (B's daemon has no peers),
	// as weightsnapd's prefetch directory would.
	wsOK(t, b.ws.Root, "rm", dryB.ID)
	prefetchDir := filepath.Join(work, "prefetch")
	if err := os.MkdirAll(prefetchDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefetchDir, "cache.toml"), []byte(fmt.Sprintf("[[artifact]]\nref = %q\nidentity = %q\n", cacheRef, dryB.ID)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wsWith(t, b.ws.Config, "prefetch", "sync", prefetchDir); r.code != 0 {
		t.Fatalf("prefetch sync of the cache: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if got := fileSums(t, storeB); !sameSums(got, published) {
		t.Fatalf("the prefetched cache holds %v, want %v", got, published)
	}

	// A weight image with the cache, from the registry: the container's
	// rootfs has it, writable through its own layer. B's store lost it
	// again: the snapshotter pulls it from the registry the pointer names
	// (storeB is read again below).
	wsOK(t, b.ws.Root, "rm", dryB.ID)
	image := strings.TrimSpace(wsOK(t, t.TempDir(), "image", "build", "--plain-http", "--base", b.base, "-t", b.reg.Ref("apps/standin:v1"),
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
	wsOK(t, b.ws.Root, "verify", "--full", dryB.ID)

	t.Logf("time to ready: first start (compiles) %.3f s (compile %.3f s); second start on node B (cache fetched from A's peer in %.3f s, mounted writable) %.3f s; in a container of a weight image %.3f s",
		firstReady.Seconds, firstReady.CompileSeconds, fetchSeconds, second.Seconds, inContainer.Seconds)
}
