//go:build bench

package e2e

// The snapshotter benchmark, run by
// scripts/bench-snapshotter.sh (make bench), never by make test:
//
//	go test -tags bench -count=1 -timeout 120m -run '^TestSnapshotterBench$' ./test/e2e/
//
// For each size, one node (registry, weightsnapd, containerd) and one
// checkpoint, and three snapshotters: weightsnap (a weight image of the
// artifact over busybox), and containerd's overlayfs and erofs (its erofs
// differ converting the layer into an EROFS image) on ordinary images of the
// same files in one uncompressed tar layer, from the same local registry.
// Beside them, weightsnap built into containerd (test/e2e/containerd-weightsnap,
// a second containerd with a store of its own on the node), with no goal of
// its own.
// Each is timed from the container's start to the first weight byte read in
// it, for (a) cold: nothing of the image on the node (for weightsnap, nor the
// artifact in its store; with DROP_CACHES=1 none of it in the page cache,
// the registry's blobs read back into it, see settle), (b) second: after
// (a), a second image with the same weights (for weightsnap the same
// artifact over another base; for the others by ctr the same layer over
// another base, by nerdctl the same layer under another tag), (c) warm:
// (a)'s image again. Beside each time, the bytes the node wrote during it
// (benchWritten).
//
// Each starts with `nerdctl run`, and again with `ctr images pull --local`
// and `ctr run` (ctr of the containerd pin), so that erofs, which only ctr
// runs, has rows of the same tool beside it: nerdctl (v2.1.3, the pin, built
// on containerd's 2.1 client) cannot run an erofs image of containerd 2.4. It
// mounts the image's view and the container's rootfs itself, and the erofs
// snapshotter's mounts of them are templated ("format/mkdir/overlay" over
// "{{ mount 0 }}") for containerd 2.2+'s mount manager, so nerdctl fails with
// "no such device". The image nerdctl runs is one layer, busybox's files and
// the weights (the second another tag of it), the first way round that
// (nerdctl's view of one erofs layer is that layer's EROFS image, which it
// mounts; of two, such an overlay); ctr runs the weights' layer over busybox
// and over another base.
// The differ's tar-index mode does not run: see harness.ContainerdOptions.Erofs.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/benchrow"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// benchCases are the columns of the table: (a), (b), (c).
var benchCases = []string{"(a) cold", "(b) second", "(c) warm"}

// contender is one snapshotter of the table and its two images.
type contender struct {
	name, snapshotter string
	n                 *snapNode // the node whose containerd and store it runs on
	builtin           bool      // weightsnap built into containerd: shown beside the others, no goal of its own
	ctr               bool      // run by ctr, not nerdctl (see the top)
	images            [2]string // (a) and (c) run the first, (b) the second
	layer             string    // the hex of the weights' layer, gone before (a); "" for weightsnap
	secs, bytes       [3]benchrow.Runs
}

func TestSnapshotterBench(t *testing.T) {
	sizes := strings.Fields(envOr("BENCH_SIZES", "2GiB 4GiB"))
	reps := benchrow.Reps()
	type row struct {
		size string
		disk benchrow.Runs // the disk's floor: the weights' bytes written and synced
		cs   []*contender
	}
	var rows []row
	bin := buildBuiltinContainerd(t)
	for _, size := range sizes {
		t.Run(size, func(t *testing.T) {
			n := startSnapNodeFull(t, "weightsnap.toml", harness.WeightsnapdOptions{}, harness.ContainerdOptions{Erofs: true})
			b := startBuiltinNode(t, n.reg, bin, n.base)
			w := n.pushWeightImage(t, "bench", size, 4, "/models/x")
			// The second base: busybox and one small layer of its own.
			base2 := pushTarImage(t, n.base, t.TempDir(), "etc/base2", n.reg.Ref("base2:latest"))
			w2 := n.buildImageOver(t, base2, "bench2", "", "/models/x", w.pushedArtifact)
			tarImg := n.reg.Ref("apps/bench-tar:v1")
			flat := pushFlatImage(t, n.base, w.src, "models/x", tarImg).Digest.Encoded()
			tarImgs := [2]string{tarImg, tagImage(t, tarImg, "v2")}
			// For ctr, which runs them: the weights' layer over busybox, and over base2.
			layerPath := filepath.Join(t.TempDir(), "layer.tar")
			layer := writeTarLayer(t, w.src, "models/x", layerPath)
			overImgs := [2]string{
				pushLayerImage(t, n.base, layerPath, layer, n.reg.Ref("apps/bench-over:v1")),
				pushLayerImage(t, base2, layerPath, layer, n.reg.Ref("apps/bench-over:v2")),
			}
			os.Remove(layerPath)
			over := layer.Digest.Encoded()
			first := firstWeightFile(t, w.files)
			wsImgs := [2]string{w.ref, w2}
			// The weightsnap row of each tool last among that tool's rows.
			cs := []*contender{
				{name: "overlayfs", snapshotter: "overlayfs", n: n, images: tarImgs, layer: flat},
				{name: "built-in", snapshotter: "weightsnap", n: b, builtin: true, images: wsImgs},
				{name: "weightsnap", snapshotter: "weightsnap", n: n, images: wsImgs},
				{name: "overlayfs (ctr)", snapshotter: "overlayfs", n: n, ctr: true, images: overImgs, layer: over},
				{name: "erofs (ctr)", snapshotter: "erofs", n: n, ctr: true, images: overImgs, layer: over},
				{name: "built-in (ctr)", snapshotter: "weightsnap", n: b, builtin: true, ctr: true, images: wsImgs},
				{name: "weightsnap (ctr)", snapshotter: "weightsnap", n: n, ctr: true, images: wsImgs},
			}
			var disk benchrow.Runs
			for i := 0; i < reps; i++ {
				t.Logf("%s: round %d of %d", size, i+1, reps)
				settle(t, n.reg)
				disk = append(disk, syncedWrite(t, t.TempDir(), w.bytes, 4))
				for _, c := range cs {
					if res := ws(t, c.n.ws.Root, "rm", w.id); res.code != 0 && res.code != 3 { // 3: not in the store
						t.Fatalf("weightsnap rm: exit %d: %s", res.code, res.errOut)
					}
					if c.layer != "" {
						noLayerBlob(t, c.n.ctd, c.layer)
					}
					for k, img := range []string{c.images[0], c.images[1], c.images[0]} {
						s, b := benchRun(t, c.n, c.n.ctd, img, c.snapshotter, first, c.ctr)
						c.secs[k], c.bytes[k] = append(c.secs[k], s), append(c.bytes[k], b)
					}
					rmImage(t, c.n, c.n.ctd, c.images[:]...)
				}
			}
			rows = append(rows, row{size: size, disk: disk, cs: cs})
		})
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "\nweightsnap snapshotter benchmark: a container's start (nerdctl run, or ctr: ctr images pull --local and ctr run) to the first weight byte read in it\n")
	fmt.Fprintf(&out, "%d cores, median [min-max] of %d rounds, same local registry; overlayfs and erofs: the same files as one uncompressed tar layer\n", runtime.NumCPU(), reps)
	fmt.Fprintf(&out, "(a) cold: nothing on the node, the page cache emptied (the registry's blobs read back: it stands for a remote one); (b) second: after (a), another image of the same weights: weightsnap over another base,\n")
	fmt.Fprintf(&out, "    the others by ctr the same layer over another base, by nerdctl (busybox and the weights in one layer) another tag;\n")
	fmt.Fprintf(&out, "(c) warm: (a)'s image again\n")
	fmt.Fprintf(&out, "written: what containerd (mkfs.erofs with it) and weightsnapd wrote to disk during the run (write_bytes of /proc/PID/io), median\n")
	fmt.Fprintf(&out, "ratio: the contender's seconds over weightsnap's started by the same tool, median [worst-best the rounds allow]; spread: the contender's max over min, past 1.3x\n")
	fmt.Fprintf(&out, "disk floor: the weights' bytes written to the store's filesystem in 4 files and synced, every round\n")
	fmt.Fprintf(&out, "%-8s %-16s", "weights", "snapshotter")
	for _, c := range benchCases {
		fmt.Fprintf(&out, " %20s %7s", c+" s", "written")
	}
	fmt.Fprintln(&out)
	var lost []string
	for _, r := range rows {
		fmt.Fprintf(&out, "%-8s %-16s %20s\n", r.size, "disk floor", r.disk.Format(2))
		for _, c := range r.cs {
			wsc := weightsnapRow(r.cs, c.ctr)
			fmt.Fprintf(&out, "%-8s %-16s", r.size, c.name)
			for k := range benchCases {
				fmt.Fprintf(&out, " %20s %7s", c.secs[k].Format(2), gib(c.bytes[k].Median()))
				if c == wsc || c.builtin {
					continue
				}
				if wsc.secs[k].Median() >= c.secs[k].Median() {
					lost = append(lost, fmt.Sprintf("%s %s time (%s)", r.size, benchCases[k], c.name))
				}
				if wsc.bytes[k].Median() > c.bytes[k].Median()+metadataSlack {
					lost = append(lost, fmt.Sprintf("%s %s written (%s)", r.size, benchCases[k], c.name))
				}
			}
			fmt.Fprintln(&out)
		}
		for _, c := range r.cs {
			wsc := weightsnapRow(r.cs, c.ctr)
			if c == wsc {
				fmt.Fprintf(&out, "%-8s %-16s %s over the disk floor: %s\n", r.size, c.name, benchCases[0], benchrow.Ratio(c.secs[0], r.disk))
				continue
			}
			fmt.Fprintf(&out, "%-8s %-16s ratio", r.size, c.name)
			for k, name := range benchCases {
				fmt.Fprintf(&out, " %s %s;", name[:3], benchrow.Ratio(c.secs[k], wsc.secs[k]))
			}
			fmt.Fprintln(&out)
		}
	}
	verdict := "held"
	if len(lost) > 0 {
		verdict = "not held: " + strings.Join(lost, ", ")
	}
	fmt.Fprintf(&out, "goal: weightsnap ahead of each other snapshotter started by the same tool, in every column (less time by the medians, no more written but for 8 MiB of metadata): %s\n", verdict)
	fmt.Fprintf(&out, "goal: weightsnap's cold nerdctl run (a) within 1.5x the disk floor\n")
	for _, r := range rows {
		for _, c := range r.cs {
			fmt.Fprintf(&out, "runs %s %s (s):", r.size, c.name)
			for k, name := range benchCases {
				fmt.Fprintf(&out, " %s %s;", name[:3], c.secs[k].List(2))
			}
			fmt.Fprintln(&out)
		}
		fmt.Fprintf(&out, "runs %s disk floor (s): %s\n", r.size, r.disk.List(2))
	}
	fmt.Print(out.String())
	if p := os.Getenv("BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// metadataSlack is how many more bytes than another a weightsnap run may
// write and still be ahead: the databases' pages (containerd's metadata,
// weightsnapd's snapshots and leases), which every run writes, a few MiB.
const metadataSlack = 8 << 20

// weightsnapRow is the weightsnap row of cs started by ctr (useCtr) or nerdctl.
func weightsnapRow(cs []*contender, useCtr bool) *contender {
	for _, c := range cs {
		if c.snapshotter == "weightsnap" && !c.builtin && c.ctr == useCtr {
			return c
		}
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// gib formats a byte count in GiB, or MiB under one GiB.
func gib(b float64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%.0fM", b/(1<<20))
	}
	return fmt.Sprintf("%.2fG", b/(1<<30))
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

// benchRun times starting a container of img on ctd with snapshotter until
// it has read the first byte of file under /models/x, in seconds, on the
// kernel's uptime clock (shared with the container), and returns it with
// the bytes the node wrote meanwhile (benchWritten): `nerdctl run`, or with
// useCtr, `ctr images pull --local` (when img is not there yet) and `ctr run`.
func benchRun(t *testing.T, n *snapNode, ctd *harness.Containerd, img, snapshotter, file string, useCtr bool) (float64, float64) {
	t.Helper()
	settle(t, n.reg)
	pids := []int{ctd.Proc.Cmd.Process.Pid}
	if n.ws.Proc != nil { // a weightsnapd of its own, not weightsnap built into containerd
		pids = append(pids, n.ws.Proc.Cmd.Process.Pid)
	}
	before := benchWritten(t, pids)
	start := uptime(t)
	script := "head -c 1 /models/x/" + file + " >/dev/null && cat /proc/uptime"
	var out string
	var err error
	if useCtr {
		if _, err = ctd.Ctr("images", "ls", "-q", "name=="+img); err == nil {
			if got, _ := ctd.Ctr("images", "ls", "-q", "name=="+img); strings.TrimSpace(got) == "" {
				_, err = ctd.Ctr("images", "pull", "--local", "--plain-http", "--hosts-dir", ctd.HostsDir, "--snapshotter", snapshotter, img)
			}
		}
		if err == nil {
			out, err = ctd.Ctr("run", "--rm", "--snapshotter", snapshotter, img, "bench-"+strconv.FormatInt(time.Now().UnixNano(), 36), "sh", "-c", script)
		}
	} else {
		out, err = ctd.Nerdctl("--snapshotter", snapshotter, "run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
			img, "sh", "-c", script)
	}
	if err != nil {
		t.Fatal(err)
	}
	written := benchWritten(t, pids) - before
	f := strings.Fields(out)
	if len(f) == 0 {
		t.Fatalf("no uptime from the container: %q", out)
	}
	read, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s: %.2f s, %s written", snapshotter, img, read-start, gib(written))
	return read - start, written
}

// benchWritten is what the processes pids have written to disk so far:
// write_bytes less cancelled_write_bytes of /proc/PID/io, which the kernel
// counts as a process dirties page cache (so what is not yet written back
// counts) or writes directly, and takes back when a dirty page is truncated
// away before it is written. A process's count holds its reaped children's
// (mkfs.erofs, which containerd's erofs differ runs).
func benchWritten(t *testing.T, pids []int) float64 {
	t.Helper()
	var sum float64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, _ := strings.Cut(line, ": ")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "write_bytes":
				sum += x
			case "cancelled_write_bytes":
				sum -= x
			}
		}
	}
	return sum
}

// settle writes back what earlier runs left dirty and, with DROP_CACHES=1,
// empties the page cache, so each run starts from the same memory: on a
// virtual machine the pages an earlier run freed cost the next one a fault
// to the host each. Then it reads reg's blobs back into memory: the local
// registry stands for a remote one, whose reads are not the node's disk's.
// A cache left as it was holds them already.
func settle(t *testing.T, reg *harness.Registry) {
	t.Helper()
	if err := exec.Command("sync").Run(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("DROP_CACHES") != "1" {
		return
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		t.Fatal(err)
	}
	if err := reg.Warm(); err != nil {
		t.Fatal(err)
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

// rmImage removes images from ctd and waits until containerd has let go of
// their snapshots (and weightsnap of its leases).
func rmImage(t *testing.T, n *snapNode, ctd *harness.Containerd, refs ...string) {
	t.Helper()
	if _, err := ctd.Nerdctl(append([]string{"rmi", "-f"}, refs...)...); err != nil {
		t.Fatal(err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 0, 2*time.Minute)
}

// noLayerBlob waits until ctd's content store no longer holds the blob hex
// (its garbage collection after the images went), so that a cold run is cold.
func noLayerBlob(t *testing.T, ctd *harness.Containerd, hex string) {
	t.Helper()
	blob := filepath.Join(ctd.Root, "io.containerd.content.v1.content", "blobs", "sha256", hex)
	if err := testenv.Wait(time.Minute, func() error {
		if _, err := os.Stat(blob); err == nil {
			return fmt.Errorf("containerd still holds the layer %s", hex)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
