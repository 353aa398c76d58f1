package powercut

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
)

// childBin is the crash harness's child with the fault points and the
// power-cut filesystem admitted.
var childBin = &storetest.Child{Tags: "faults,powercut"}

func child(t *testing.T) string { return childBin.Path(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	childBin.Remove()
	os.Exit(code)
}

// harness runs the store operations of its scenarios on the power-cut
// filesystem, cuts the power, and checks what the durable image holds.
type harness struct {
	t     *testing.T
	child string
	src   *storetest.Source
	fault string // WEIGHTSNAP_FAULT of the operation (a skipped sync)
	cuts  int
}

func newHarness(t *testing.T) *harness {
	requireFUSE(t)
	return &harness{t: t, child: child(t), src: storetest.NewSource(t, 96<<10, 2, 7)}
}

// run is one run of an operation until it returned or the power was cut.
type run struct {
	returned bool
	syncs    int
	steps    []string
	out      string
	log      string
	report   string
}

// cut runs the scenario's operation from its prepared image under opts,
// then remounts the durable image and checks it in a fresh process. The
// error names the scenario and the cut and carries the operation log.
func (h *harness) cut(sc *scenario, start *Image, opts Options) (*run, error) {
	dir, err := os.MkdirTemp("", "ws-powercut")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r, img, err := h.operate(sc, start, opts, filepath.Join(dir, "before"))
	if err != nil {
		return r, err
	}
	h.cuts++
	expect := sc.during
	if r.returned {
		expect = sc.after
	}
	out, err := h.checkImage(img, filepath.Join(dir, "after"), expect)
	if err != nil {
		return r, fmt.Errorf("%s, %s: the invariant does not hold: %v\n%s\nthe operation printed: %s\noperation log:\n%s\n%s",
			sc.name, describe(opts, r), err, out, r.out, r.log, r.report)
	}
	return r, nil
}

func describe(opts Options, r *run) string {
	var b strings.Builder
	switch {
	case r.returned:
		b.WriteString("power cut after the operation returned")
	case opts.CutAtStep != "":
		fmt.Fprintf(&b, "power cut at fault point %s", opts.CutAtStep)
	default:
		fmt.Fprintf(&b, "power cut after sync %d", opts.CutAfterSync)
	}
	if opts.Seed != 0 {
		fmt.Fprintf(&b, " (random subset, seed %d)", opts.Seed)
	}
	return b.String()
}

// operate runs the operation in a child process over a fresh copy of start
// and returns the durable image the cut left.
func (h *harness) operate(sc *scenario, start *Image, opts Options, dir string) (*run, *Image, error) {
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	if err := start.Materialise(backing); err != nil {
		return nil, nil, err
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, nil, err
	}
	f, err := Mount(mnt, backing, opts)
	if err != nil {
		return nil, nil, err
	}
	defer f.Unmount()
	cmd := exec.Command(h.child, sc.op, mnt, h.src.Dir)
	cmd.Env = append(os.Environ(), "WEIGHTSNAP_FAULT_TRACE="+f.TracePrefix(), "WEIGHTSNAP_FAULT="+h.fault)
	var out, logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	r := &run{}
	select {
	case <-exited: // a child held at a cut cannot exit
		r.returned = true
	case <-f.Cut():
		cmd.Process.Kill() // the power is off: the child runs no further
	}
	img := f.PowerOff() // fails the requests held at the cut, which a killed child still waits for
	<-exited
	r.syncs, r.steps, r.log, r.report = f.Syncs(), f.Steps(), f.Log(), img.Report()
	r.out = strings.TrimSpace(out.String() + "\n" + logs.String())
	if r.returned && !strings.HasPrefix(r.out, sc.wantOut) {
		return r, nil, fmt.Errorf("%s: the operation, not cut, printed %q, want %q\noperation log:\n%s", sc.name, r.out, sc.wantOut, r.log)
	}
	return r, img, f.Unmount()
}

// checkImage mounts img and runs the child's check there.
func (h *harness) checkImage(img *Image, dir, expect string) (string, error) {
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	if err := img.Materialise(backing); err != nil {
		return "", err
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	f, err := Mount(mnt, backing, Options{})
	if err != nil {
		return "", err
	}
	out, err := exec.Command(h.child, "check", mnt, h.src.Dir, expect).CombinedOutput()
	if uerr := f.Unmount(); err == nil {
		err = uerr
	}
	return strings.TrimSpace(string(out)), err
}

// sweep runs the scenario's operation to its end, then again with the power
// cut right after each of its syncs and, with a seed, at each fault point it
// passes, persisting random subsets. It returns the number of sync points
// and the failures.
func (h *harness) sweep(sc *scenario, seed uint64) (int, []error) {
	start := sc.prepare(h.t, h.src)
	var failures []error
	full, err := h.cut(sc, start, Options{Seed: seed})
	switch {
	case full == nil || !full.returned:
		return 0, []error{err}
	case err != nil:
		failures = append(failures, err)
	case full.syncs == 0:
		return 0, []error{fmt.Errorf("%s: the operation made no sync call", sc.name)}
	}
	var cuts []Options
	for k := 1; k <= full.syncs; k++ {
		cuts = append(cuts, Options{CutAfterSync: k, Seed: seed})
	}
	if seed != 0 {
		for _, step := range full.steps {
			cuts = append(cuts, Options{CutAtStep: step, Seed: seed})
		}
	}
	for _, opts := range cuts {
		if _, err := h.cut(sc, start, opts); err != nil {
			failures = append(failures, err)
		}
	}
	return full.syncs, failures
}

// TestPowerCutAtEverySync cuts the power right after every sync call of a
// small import and of each lifecycle path, and once after each returned.
func TestPowerCutAtEverySync(t *testing.T) {
	h := newHarness(t)
	var points []string
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h.t = t
			n, failures := h.sweep(&sc, 0)
			for _, err := range failures {
				t.Error(err)
			}
			points = append(points, fmt.Sprintf("%s %d", sc.name, n))
		})
	}
	fmt.Printf("power-cut harness: sync points %s; %d power cuts, %s\n", strings.Join(points, ", "), h.cuts, verdict(t))
}

func verdict(t *testing.T) string {
	if t.Failed() {
		return "the invariant FAILED"
	}
	return "the invariant held every time"
}

// TestPowerCutRandomSubsets cuts the power after every sync and at every
// fault point again, each time persisting a random subset of what was not
// durable yet, for WEIGHTSNAP_POWERCUT_SEEDS seeds (2 by default).
func TestPowerCutRandomSubsets(t *testing.T) {
	h := newHarness(t)
	seeds := seedCount()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h.t = t
			for seed := range uint64(seeds) {
				_, failures := h.sweep(&sc, seed*1000+uint64(len(sc.name))+1)
				for _, err := range failures {
					t.Error(err)
				}
			}
		})
	}
	fmt.Printf("power-cut harness: random subsets at every sync and fault point, %d seeds; %d power cuts, %s\n", seeds, h.cuts, verdict(t))
}

// TestHarnessCatchesAMissingParentSync leaves out the sync of artifacts/
// after a publication's rename: the harness must fail, naming the rename
// that was not durable and the step it belongs to.
func TestHarnessCatchesAMissingParentSync(t *testing.T) {
	h := newHarness(t)
	h.fault = "publish.sync-artifacts:skip-sync"
	sc := scenarioNamed(t, "publication")
	_, failures := h.sweep(sc, 0)
	if len(failures) == 0 {
		t.Fatal("the harness passed a store that does not sync artifacts/ after publishing")
	}
	// The failure names the cut, the outcome, and the rename left out of the
	// durable image with the step it belongs to.
	want := regexp.MustCompile(`(?s)power cut after the operation returned: .*artifact is gone, want ready.*` +
		`not durable at the cut.*- rename /tmp/` + h.src.ID.Hex() + `\.\w+ -> /artifacts/` + h.src.ID.Hex() + ` \(after publish\.before-rename@1\)`)
	for _, err := range failures {
		if want.MatchString(err.Error()) {
			t.Logf("the harness failed, as it should:\n%v", err)
			return
		}
	}
	t.Errorf("no failure names the missing rename and its step; they were:\n%v", errors.Join(failures...))
}

func seedCount() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("WEIGHTSNAP_POWERCUT_SEEDS"), &n); err != nil || n <= 0 {
		return 2
	}
	return n
}

func scenarioNamed(t *testing.T, name string) *scenario {
	for i := range scenarios {
		if scenarios[i].name == name {
			return &scenarios[i]
		}
	}
	t.Fatalf("no scenario %s", name)
	return nil
}
