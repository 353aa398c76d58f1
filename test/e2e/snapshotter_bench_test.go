//go:build bench

package e2e

// The snapshotter benchmark (issue 9, done-when 5), run by
// scripts/bench-snapshotter.sh (make bench), never by make test:
//
//	go test -tags bench -count=1 -timeout 90m -run '^TestSnapshotterBench$' ./test/e2e/
//
// For each size, one node (registry, weightsnapd, containerd) and one
// checkpoint: the time from `nerdctl run` to the first weight byte read in
// the container, for (a) warm: the artifact in the store, (b) cold: the
// snapshotter pulls it during Prepare, and (c) the same files as an ordinary
// uncompressed tar layer over the same base, pulled and unpacked by
// containerd's overlayfs snapshotter from the same local registry. Every
// run starts without the image (removed, and containerd's content and
// snapshots with it); cold and overlay start without the weights on the node.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

func TestSnapshotterBench(t *testing.T) {
	sizes := strings.Fields(envOr("BENCH_SIZES", "2GiB 4GiB"))
	reps, _ := strconv.Atoi(envOr("BENCH_REPS", "3"))
	type row struct {
		size                string
		warm, cold, overlay []float64
	}
	var rows []row
	for _, size := range sizes {
		t.Run(size, func(t *testing.T) {
			n := startSnapNode(t)
			w := n.pushWeightImage(t, "bench", size, 4, "/models/x")
			tarImg := pushTarImage(t, n.base, w.src, "models/x", n.reg.Ref("apps/bench-tar:v1"))
			first := firstWeightFile(t, w.files)
			r := row{size: size}
			for i := 0; i < reps; i++ {
				t.Logf("%s: round %d of %d", size, i+1, reps)
				r.overlay = append(r.overlay, benchRun(t, n, tarImg, "overlayfs", first))
				rmImage(t, n, tarImg)
				if res := ws(t, n.ws.Root, "rm", w.id); res.code != 0 && res.code != 3 { // 3: not in the store
					t.Fatalf("weightsnap rm: exit %d: %s", res.code, res.errOut)
				}
				r.cold = append(r.cold, benchRun(t, n, w.ref, "weightsnap", first))
				rmImage(t, n, w.ref)
				r.warm = append(r.warm, benchRun(t, n, w.ref, "weightsnap", first))
				rmImage(t, n, w.ref)
			}
			rows = append(rows, r)
		})
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "\nweightsnap snapshotter benchmark: nerdctl run to the first weight byte read in the container\n")
	fmt.Fprintf(&out, "%d cores, median of %d, same local registry; overlayfs = the same files as an uncompressed tar layer\n", runtime.NumCPU(), reps)
	fmt.Fprintf(&out, "%-8s %12s %12s %12s %14s %14s\n", "weights", "warm (s)", "cold (s)", "overlayfs (s)", "overlay/warm", "overlay/cold")
	for _, r := range rows {
		wm, cm, om := median(r.warm), median(r.cold), median(r.overlay)
		fmt.Fprintf(&out, "%-8s %12.2f %12.2f %12.2f %13.1fx %13.1fx\n", r.size, wm, cm, om, om/wm, om/cm)
	}
	fmt.Fprintf(&out, "goals: overlay/warm >= 20x and flat from 2 to 4 GiB; overlay/cold >= 4x\n")
	secs := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.2f", x)
		}
		return strings.Join(s, " ")
	}
	for _, r := range rows {
		fmt.Fprintf(&out, "runs %s (s): warm %s | cold %s | overlayfs %s\n", r.size, secs(r.warm), secs(r.cold), secs(r.overlay))
	}
	fmt.Print(out.String())
	if p := os.Getenv("BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func median(v []float64) float64 {
	s := append([]float64{}, v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// firstWeightFile is the first safetensors file of files (path -> sha256), by name.
func firstWeightFile(t *testing.T, files map[string]string) string {
	t.Helper()
	var names []string
	for p := range files {
		if strings.HasSuffix(p, ".safetensors") {
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		t.Fatal("no safetensors file")
	}
	sort.Strings(names)
	return names[0]
}

// benchRun times `nerdctl run` of img with snapshotter until the container
// has read the first byte of file under /models/x, in seconds, on the
// kernel's uptime clock (shared with the container).
func benchRun(t *testing.T, n *snapNode, img, snapshotter, file string) float64 {
	t.Helper()
	settle(t)
	start := uptime(t)
	out, err := n.ctd.Nerdctl("--snapshotter", snapshotter, "run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
		img, "sh", "-c", "head -c 1 /models/x/"+file+" >/dev/null && cat /proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		t.Fatalf("no uptime from the container: %q", out)
	}
	read, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s: %.2f s", snapshotter, img, read-start)
	return read - start
}

// settle writes back what earlier runs left dirty and, with DROP_CACHES=1,
// empties the page cache, so each run starts from the same memory: on a
// virtual machine the pages an earlier run freed cost the next one a fault
// to the host each.
func settle(t *testing.T) {
	t.Helper()
	if err := exec.Command("sync").Run(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("DROP_CACHES") == "1" {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func uptime(t *testing.T) float64 {
	raw, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return v
}

// rmImage removes an image and waits until containerd has let go of its
// snapshots (and weightsnapd of its leases).
func rmImage(t *testing.T, n *snapNode, ref string) {
	t.Helper()
	if _, err := n.ctd.Nerdctl("rmi", "-f", ref); err != nil {
		t.Fatal(err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 0, 2*time.Minute)
}

// pushTarImage pushes the files of dir as one uncompressed tar layer
// (under prefix) over base, or alone when base is "", as the image ref
// (plain HTTP), and returns ref.
func pushTarImage(t *testing.T, base, dir, prefix, ref string) string {
	t.Helper()
	ctx := context.Background()
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	layer := writeTarLayer(t, dir, prefix, layerPath)
	defer os.Remove(layerPath)

	target, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	target.PlainHTTP = true
	push := func(desc ocispec.Descriptor, r io.Reader) {
		t.Helper()
		if err := target.Push(ctx, desc, r); err != nil {
			t.Fatal(err)
		}
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig}}
	cfg := map[string]any{"architecture": runtime.GOARCH, "os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []any{}}}
	if base != "" {
		from, err := registry.New(ctx, base, registry.Options{PlainHTTP: true})
		if err != nil {
			t.Fatal(err)
		}
		_, rawManifest, err := oras.FetchBytes(ctx, from.Repo, "latest", oras.DefaultFetchBytesOptions)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rawManifest, &m); err != nil {
			t.Fatal(err)
		}
		rawCfg, err := content.FetchAll(ctx, from.Repo, m.Config)
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(rawCfg, &cfg)
		delete(cfg, "history")
		for _, l := range m.Layers {
			rc, err := from.Repo.Fetch(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			push(l, rc)
			rc.Close()
		}
	}
	rootfs := cfg["rootfs"].(map[string]any)
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), layer.Digest.String())
	rawCfg, _ := json.Marshal(cfg)

	f, err := os.Open(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	push(layer, f)
	f.Close()
	cd := ocispec.Descriptor{MediaType: m.Config.MediaType, Digest: digest.FromBytes(rawCfg), Size: int64(len(rawCfg))}
	push(cd, bytes.NewReader(rawCfg))
	m.Config, m.Layers = cd, append(m.Layers, layer)
	raw, _ := json.Marshal(m)
	md := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := target.PushReference(ctx, md, bytes.NewReader(raw), ref[strings.LastIndex(ref, ":")+1:]); err != nil {
		t.Fatal(err)
	}
	return ref
}

// writeTarLayer writes the files of dir under prefix as an uncompressed tar
// and returns its descriptor.
func writeTarLayer(t *testing.T, dir, prefix, path string) ocispec.Descriptor {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	epoch := time.Unix(0, 0)
	parts := strings.Split(prefix, "/")
	for i := range parts {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, ModTime: epoch})
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := src.Stat()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + "/" + e.Name(), Mode: 0o444, Size: fi.Size(), ModTime: epoch}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyBuffer(tw, src, make([]byte, 4<<20)); err != nil {
			t.Fatal(err)
		}
		src.Close()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.NewDigest(digest.SHA256, h), Size: cw.n}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
