//go:build bench

package e2e

// The cold Prepare benchmark, in `make bench`, never in make test:
//
//	go test -tags bench -count=1 -timeout 60m -run '^TestColdPrepareBench$' -v ./test/e2e/
//
// For each size, one node (registry, weightsnapd, containerd) and one weight
// image, and in each round, each from an empty store and (DROP_CACHES=1) an
// empty page cache, the registry's blobs read back into it (settle):
// `weightsnap pull` of the image's artifact into a store of
// its own (the CLI's seconds and CPU seconds), and `nerdctl run` of the image
// with the artifact nowhere on the node, to the first weight byte read in the
// container: the weight layer's Prepare (weightsnapd pulls the artifact into
// its store in it; its seconds from the daemon's weight_prepare_seconds and
// the daemon's CPU seconds meanwhile) and the whole run, in alternate order
// from round to round (BENCH_REPS, 5 by default). What the Prepare adds
// to the plain pull is the difference of the two in each round; what it
// does beyond the pull it runs (the weight snapshot and its view) is its
// seconds less its resolution's (the daemon's resolve_seconds). The disk
// row is the floor of both: the same bytes written to the store's
// filesystem in 4 files and synced (a store writes every byte durably
// before the artifact is READY), from an empty page cache too, in every
// round; the receive floor (benchrow.ReceiveFloor: the artifact's layers
// fetched from the same registry and dropped) is measured in every round
// too, and with the hashing floor (scripts/hash-floor.sh, measured before
// the rounds) it is the least CPU a pull can take; the CPU-s per GiB are
// stated as multiples of the BLAKE3 figure. Every figure is the median of
// the rounds with its min and max (test/benchrow).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/test/benchrow"
)

func TestColdPrepareBench(t *testing.T) {
	sizes := strings.Fields(envOr("BENCH_SIZES", "2GiB 4GiB"))
	reps := benchrow.Reps()
	floor := hashFloor(t)
	type row struct {
		size                                     string
		bytes                                    int64
		pull, pullCPU, prep, prepCPU, cold, disk benchrow.Runs
		beyond                                   benchrow.Runs // the Prepare less its resolution
		recv, recvCPU                            benchrow.Runs // the receive floor
	}
	var rows []row
	for _, size := range sizes {
		t.Run(size, func(t *testing.T) {
			n := startSnapNode(t)
			w := n.pushWeightImage(t, "cold", size, 4, "/models/x")
			first := firstWeightFile(t, w.files)
			r := row{size: size, bytes: w.bytes}
			gib := float64(w.bytes) / (1 << 30)
			pull := func() {
				root := filepath.Join(t.TempDir(), "store")
				settle(t, n.reg)
				secs, cpu := timedPull(t, root, w.pushedArtifact.ref)
				r.pull, r.pullCPU = append(r.pull, secs), append(r.pullCPU, cpu/gib)
				if res := ws(t, root, "rm", w.id); res.code != 0 {
					t.Fatalf("weightsnap rm: exit %d: %s", res.code, res.errOut)
				}
			}
			prepare := func() {
				if res := ws(t, n.ws.Root, "rm", w.id); res.code != 0 && res.code != 3 { // 3: not in the store
					t.Fatalf("weightsnap rm: exit %d: %s", res.code, res.errOut)
				}
				prep0, cpu0 := n.metric(t, `weightsnap_snapshotter_weight_prepare_seconds_sum{outcome="fetched"}`), procCPU(t, n.ws.Proc.Cmd.Process.Pid)
				res0 := n.metric(t, `weightsnap_snapshotter_resolve_seconds_sum{outcome="fetched"}`)
				secs, _ := benchRun(t, n, n.ctd, w.ref, "weightsnap", first, false)
				r.cold = append(r.cold, secs)
				r.prep = append(r.prep, n.metric(t, `weightsnap_snapshotter_weight_prepare_seconds_sum{outcome="fetched"}`)-prep0)
				r.beyond = append(r.beyond, r.prep[len(r.prep)-1]-(n.metric(t, `weightsnap_snapshotter_resolve_seconds_sum{outcome="fetched"}`)-res0))
				r.prepCPU = append(r.prepCPU, (procCPU(t, n.ws.Proc.Cmd.Process.Pid)-cpu0)/gib)
				rmImage(t, n, n.ctd, w.ref)
			}
			for i := 0; i < reps; i++ {
				t.Logf("%s: round %d of %d", size, i+1, reps)
				settle(t, n.reg)
				r.disk = append(r.disk, syncedWrite(t, t.TempDir(), w.bytes, 4))
				got, err := benchrow.ReceiveFloor(t.Context(), w.pushedArtifact.ref, artifact.FilesInFlight())
				if err != nil {
					t.Fatal(err)
				}
				r.recv, r.recvCPU = append(r.recv, got.Seconds), append(r.recvCPU, got.CPU/(float64(got.Bytes)/(1<<30)))
				// Alternate rounds run the Prepare first: the step that ran
				// first in a round measured 0.7 s slower at 2 GiB,
				// whichever step it was.
				if i%2 == 0 {
					pull()
					prepare()
				} else {
					prepare()
					pull()
				}
			}
			rows = append(rows, r)
		})
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "\ncold start: weightsnap pull vs the weight layer's cold Prepare (weightsnapd pulls in it), same artifact and registry\n")
	fmt.Fprintf(&out, "%d cores, median [min-max] of %d rounds, each from an empty store (and page cache, the registry's blobs read back: it stands for a remote one); ratio: over the disk floor, median [worst-best the rounds allow]\n", runtime.NumCPU(), reps)
	fmt.Fprintf(&out, "hashing floor: BLAKE3 %s, sha256 %s CPU-s/GiB per core (scripts/hash-floor.sh, this run); CPU-s/GiB: the CLI's, and the daemon's over the Prepare\n", floor.b3.Format(3), floor.sha.Format(3))
	fmt.Fprintf(&out, "%-8s %-28s %20s %26s %20s %20s\n", "weights", "measure", "seconds", "over the disk floor", "CPU-s/GiB", "x BLAKE3 floor")
	for _, r := range rows {
		added := make(benchrow.Runs, len(r.prep))
		for i := range r.prep {
			added[i] = r.prep[i] - r.pull[i]
		}
		line := func(what string, secs, cpu benchrow.Runs) {
			over, c, f := "", "", ""
			if secs != nil {
				over = benchrow.Ratio(secs, r.disk)
			}
			if cpu != nil {
				c, f = cpu.Format(2), overFloor(cpu, floor.b3.Median()).Format(2)+"x"
			}
			s := ""
			if secs != nil {
				s = secs.Format(2)
			}
			fmt.Fprintf(&out, "%-8s %-28s %20s %26s %20s %20s\n", r.size, what, s, over, c, f)
		}
		fmt.Fprintf(&out, "%-8s %-28s %20s\n", r.size, "disk floor (synced write)", r.disk.Format(2))
		line("receive floor (GET only)", r.recv, r.recvCPU)
		both := make(benchrow.Runs, len(r.recvCPU))
		for i, c := range r.recvCPU {
			both[i] = c + floor.b3.Median()
		}
		line("receive + BLAKE3 floors", nil, both)
		line("weightsnap pull", r.pull, r.pullCPU)
		line("Prepare (cold, fetched)", r.prep, r.prepCPU)
		fmt.Fprintf(&out, "%-8s %-28s %20s\n", r.size, "added by the Prepare", added.Format(2))
		fmt.Fprintf(&out, "%-8s %-28s %20s\n", r.size, "Prepare beyond its pull", r.beyond.Format(3))
		line("nerdctl run, cold", r.cold, nil)
	}
	fmt.Fprintf(&out, "receive floor: every layer of the artifact fetched from the registry (%d at a time, as the pull) and dropped, this process's CPU; receive + BLAKE3: the least CPU a pull can take\n", artifact.FilesInFlight())
	fmt.Fprintf(&out, "goals: the cold nerdctl run within 1.5x the disk floor; the pull at most 1.5x the BLAKE3 floor in CPU-s/GiB; the Prepare adds under 0.2 s\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "runs %s (s): disk %s | receive %s | pull %s | Prepare %s | run %s\n", r.size, r.disk.List(2), r.recv.List(2), r.pull.List(2), r.prep.List(2), r.cold.List(2))
	}
	fmt.Print(out.String())
}

// overFloor is each of cpu (CPU-s per GiB) over the hashing floor f.
func overFloor(cpu benchrow.Runs, f float64) benchrow.Runs {
	o := make(benchrow.Runs, len(cpu))
	for i, c := range cpu {
		o[i] = c / f
	}
	return o
}

// floors is this machine's hashing floor, CPU seconds per GiB of one
// core: each hash's min, median and max over scripts/hash-floor.sh's runs.
type floors struct{ sha, b3 benchrow.Runs }

// hashFloor measures the hashing floor with scripts/hash-floor.sh, whose
// line is the medians, the cores and the min and max of each hash.
func hashFloor(t *testing.T) floors {
	t.Helper()
	cmd := exec.Command("scripts/hash-floor.sh")
	cmd.Dir = filepath.Join("..", "..")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/hash-floor.sh: %v", err)
	}
	var sha, b3, shaMin, shaMax, b3Min, b3Max float64
	var cores int
	if _, err := fmt.Sscan(string(raw), &sha, &b3, &cores, &shaMin, &shaMax, &b3Min, &b3Max); err != nil {
		t.Fatalf("scripts/hash-floor.sh printed %q: %v", raw, err)
	}
	return floors{sha: benchrow.Runs{shaMin, sha, shaMax}, b3: benchrow.Runs{b3Min, b3, b3Max}}
}

// timedPull runs `weightsnap pull --plain-http ref` into the store root and
// returns its seconds and CPU seconds (user and system).
func timedPull(t *testing.T, root, ref string) (secs, cpu float64) {
	t.Helper()
	cmd := exec.Command(weightsnapBin(t), "--root", root, "--config", "", "pull", "--plain-http", ref)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("weightsnap pull: %v: %s", err, errOut.String())
	}
	secs = time.Since(start).Seconds()
	u := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return secs, u.Seconds()
}

// procCPU is the CPU seconds (user and system) process pid has used so far.
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name, which ends with the last ')'.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// syncedWrite is the disk's floor for size bytes over files files under dir.
func syncedWrite(t *testing.T, dir string, size int64, files int) float64 {
	t.Helper()
	secs, err := benchrow.DiskFloor(dir, size, files)
	if err != nil {
		t.Fatal(err)
	}
	return secs
}
