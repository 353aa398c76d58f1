package prefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
)

// fakeRegistry resolves "reg/NAME:TAG" by building a synthesised model
// into the store, failing the first fails[ref] tries.
type fakeRegistry struct {
	d     *store.Domain
	srcs  map[string]*artifact.SourceDir
	fails map[string]int
	tries map[string]int
}

func (f *fakeRegistry) resolve(ctx context.Context, e Declared) (artifact.ID, error) {
	f.tries[e.Ref]++
	if f.tries[e.Ref] <= f.fails[e.Ref] {
		return artifact.ID{}, fmt.Errorf("registry down: %w", errdefs.ErrUnavailable)
	}
	src, ok := f.srcs[e.Ref]
	if !ok {
		return artifact.ID{}, errdefs.ErrNotFound
	}
	id := artifact.PassthroughIdentity(src, e.Ref, "0123456789abcdef0123456789abcdef01234567", "", 0, 0)
	l, _, err := f.d.GetOrBuild(ctx, id, &artifact.Passthrough{Src: src})
	if err != nil {
		return artifact.ID{}, err
	}
	defer l.Close()
	return l.ID, nil
}

// configMap is a directory laid out as the kubelet mounts a ConfigMap:
// NAME -> ..data/NAME, ..data -> ..<version>; update swaps ..data.
type configMap struct {
	dir     string
	version int
}

func (c *configMap) update(t *testing.T, files map[string]string) {
	t.Helper()
	c.version++
	ver := fmt.Sprintf("..2026_12_01_%d", c.version)
	if err := os.Mkdir(filepath.Join(c.dir, ver), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ver, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ver, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil { // the atomic swap
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries { // names the new version lacks go
		if _, ok := files[e.Name()]; !ok && e.Type()&os.ModeSymlink != 0 && e.Name()[0] != '.' {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}

func TestPrefetchFollowsTheConfigMap(t *testing.T) {
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeRegistry{d: d, srcs: map[string]*artifact.SourceDir{}, fails: map[string]int{"reg/b:v1": 2}, tries: map[string]int{}}
	for _, name := range []string{"a", "b", "c"} {
		dir := filepath.Join(t.TempDir(), name)
		if err := synth.Write(ctx, dir, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: uint64(name[0])}); err != nil {
			t.Fatal(err)
		}
		src, _, err := artifact.ScanSource(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		reg.srcs["reg/"+name+":v1"] = src
	}
	now := time.Unix(1_000_000, 0)
	cm := &configMap{dir: t.TempDir()}
	m := New(Config{Dir: cm.dir, Store: d, Resolve: reg.resolve, Now: func() time.Time { return now }})
	pinnedBy := func(ref string) []store.Pin {
		t.Helper()
		for _, s := range m.List() {
			if s.Ref == ref && s.State == StateReady {
				pins, _ := d.Pins(s.ID)
				return pins
			}
		}
		return nil
	}
	state := func(ref string) string {
		for _, s := range m.List() {
			if s.Ref == ref {
				return s.State
			}
		}
		return "absent"
	}

	cm.update(t, map[string]string{"models.toml": `
[[artifact]]
ref = "reg/a:v1"
pin = true

[[artifact]]
ref = "reg/b:v1"
pin = true

[[artifact]]
ref = "reg/c:v1"
pin = false
`, "broken.toml": "[[artifact]]\nref = 7\n"})
	m.Sync(ctx)
	if pins := pinnedBy("reg/a:v1"); len(pins) != 1 || pins[0].By != "prefetch:models.toml" {
		t.Fatalf("a after the first sync: %s, pins %+v", state("reg/a:v1"), pins)
	}
	if state("reg/c:v1") != StateReady || len(pinnedBy("reg/c:v1")) != 0 {
		t.Fatalf("c (pin = false): %s, pins %+v", state("reg/c:v1"), pinnedBy("reg/c:v1"))
	}
	if state("reg/b:v1") != StateFailed {
		t.Fatalf("b, whose registry is down: %s", state("reg/b:v1"))
	}
	m.Sync(ctx) // within the backoff: not tried again
	if reg.tries["reg/b:v1"] != 1 {
		t.Fatalf("b tried %d times within its backoff", reg.tries["reg/b:v1"])
	}
	for range 2 { // 1 s, then 2 s of backoff
		now = now.Add(2 * time.Second)
		m.Sync(ctx)
	}
	if state("reg/b:v1") != StateReady || len(pinnedBy("reg/b:v1")) != 1 || reg.tries["reg/b:v1"] != 3 {
		t.Fatalf("b after its backoff: %s after %d tries", state("reg/b:v1"), reg.tries["reg/b:v1"])
	}
	var aID artifact.ID
	for _, s := range m.List() {
		if s.Ref == "reg/a:v1" {
			aID = s.ID
		}
	}
	if err := d.Pin(ctx, aID, store.Pin{By: store.PinByCLI}); err != nil {
		t.Fatal(err)
	}

	// The ConfigMap changes in place: a leaves; its prefetch pin goes, the
	// CLI's stays, and the artifact stays.
	cm.update(t, map[string]string{"models.toml": "[[artifact]]\nref = \"reg/b:v1\"\npin = true\n"})
	m.Sync(ctx)
	if state("reg/a:v1") != "absent" {
		t.Fatalf("a is still listed after its entry left: %s", state("reg/a:v1"))
	}
	pins, _ := d.Pins(aID)
	if len(pins) != 1 || pins[0].By != store.PinByCLI {
		t.Fatalf("a's pins after its entry left: %+v", pins)
	}
	if l, err := d.Lookup(ctx, aID, ""); err != nil {
		t.Fatalf("a was deleted with its entry: %v", err)
	} else {
		l.Close()
	}
	// The whole file goes: b is unpinned too.
	cm.update(t, map[string]string{})
	m.Sync(ctx)
	bID := reg.id(t, "reg/b:v1")
	if pins, _ := d.Pins(bID); len(pins) != 0 || len(m.List()) != 0 {
		t.Fatalf("after the file went: b pins %+v, entries %+v", pins, m.List())
	}
}

func (f *fakeRegistry) id(t *testing.T, ref string) artifact.ID {
	id, err := artifact.PassthroughIdentity(f.srcs[ref], ref, "0123456789abcdef0123456789abcdef01234567", "", 0, 0).ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPrefetchFileIsStrict(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown.toml": "[[artifact]]\nref = \"r/a:v1\"\npinned = true\n",
		"empty.toml":   "[[artifact]]\npin = true\n",
		"badid.toml":   "[[artifact]]\nidentity = \"sha256:xyz\"\n",
		"ok.toml":      "[[artifact]]\nidentity = \"sha256:" + fmt.Sprintf("%064x", 1) + "\"\n",
		"ignored.yaml": "not read",
		".hidden.toml": "not read",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, bad := readDir(dir)
	if len(got) != 1 || got[0].File != "ok.toml" || got[0].ID.IsZero() {
		t.Fatalf("declared %+v", got)
	}
	for _, name := range []string{"unknown.toml", "empty.toml", "badid.toml"} {
		if err := bad[name]; err == nil || !errdefs.IsInvalidArgument(err) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid-argument error", name, err)
		}
	}
	if len(bad) != 3 {
		t.Fatalf("bad files %v", bad)
	}
}

// TestPrefetchListsInvalidFiles: a file that fails to parse is listed with
// its error and counted in weightsnap_prefetch_files_invalid; the log says
// its pins are kept, and they are; once fixed it is neither listed as
// invalid nor counted.
func TestPrefetchListsInvalidFiles(t *testing.T) {
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "a")
	if err := synth.Write(ctx, src, synth.Options{Size: 64 << 10, Shards: 1, DType: "BF16", Seed: 7}); err != nil {
		t.Fatal(err)
	}
	scanned, _, err := artifact.ScanSource(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeRegistry{d: d, srcs: map[string]*artifact.SourceDir{"reg/a:v1": scanned}, fails: map[string]int{}, tries: map[string]int{}}
	aID := reg.id(t, "reg/a:v1")
	dir := t.TempDir()
	var logs bytes.Buffer
	logger := logrus.New()
	logger.SetOutput(&logs)
	lctx := log.WithLogger(ctx, logrus.NewEntry(logger))
	m := New(Config{Dir: dir, Store: d, Resolve: reg.resolve})
	for _, step := range []struct {
		name    string
		body    string
		invalid bool   // models.toml is listed as invalid and counted
		logs    string // what the log says at this sync
	}{
		{name: "valid", body: "[[artifact]]\nref = \"reg/a:v1\"\npin = true\n", logs: "prefetch: entry ready"},
		{name: "broken", body: "[[artifact]]\nref = \"reg/a:v1\"\npin = tru\n", invalid: true, logs: "its pins are kept"},
		{name: "fixed", body: "[[artifact]]\nref = \"reg/a:v1\"\npin = true\n", logs: "read again"},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "models.toml"), []byte(step.body), 0o644); err != nil {
				t.Fatal(err)
			}
			logs.Reset()
			m.Sync(lctx)
			var invalid []Status
			for _, s := range m.List() {
				if s.State == StateInvalid {
					invalid = append(invalid, s)
				}
			}
			if step.invalid != (len(invalid) == 1) || (step.invalid && (invalid[0].File != "models.toml" || !strings.Contains(invalid[0].Error, "models.toml"))) {
				t.Fatalf("invalid statuses %+v, want models.toml's %v", invalid, step.invalid)
			}
			if got := testutil.ToFloat64(m.invalid); got != float64(len(invalid)) {
				t.Fatalf("weightsnap_prefetch_files_invalid %v, want %d", got, len(invalid))
			}
			if !strings.Contains(logs.String(), step.logs) {
				t.Fatalf("log %q, want it to say %q", logs.String(), step.logs)
			}
			if pins, _ := d.Pins(aID); len(pins) != 1 || pins[0].By != Holder("models.toml") {
				t.Fatalf("pins %+v, want the file's", pins)
			}
		})
	}
}

// TestPrefetchFailureLogsOnce: an entry that fails the same way at every
// retry logs when it begins and when it resolves, not at each try.
func TestPrefetchFailureLogsOnce(t *testing.T) {
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "a")
	if err := synth.Write(ctx, src, synth.Options{Size: 64 << 10, Shards: 1, DType: "BF16", Seed: 8}); err != nil {
		t.Fatal(err)
	}
	scanned, _, err := artifact.ScanSource(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	reg := &fakeRegistry{d: d, srcs: map[string]*artifact.SourceDir{"reg/a:v1": scanned}, fails: map[string]int{"reg/a:v1": 3}, tries: map[string]int{}}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "models.toml"), []byte("[[artifact]]\nref = \"reg/a:v1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := logrus.New()
	logger.SetOutput(&logs)
	now := time.Unix(1_000_000, 0)
	m := New(Config{Dir: dir, Store: d, Resolve: reg.resolve, Now: func() time.Time { return now }, RetryMax: time.Second})
	for range 4 {
		m.Sync(log.WithLogger(ctx, logrus.NewEntry(logger)))
		now = now.Add(2 * time.Second)
	}
	if reg.tries["reg/a:v1"] != 4 {
		t.Fatalf("%d tries, want 4", reg.tries["reg/a:v1"])
	}
	for what, want := range map[string]int{"entry not resolved": 1, "entry ready": 1} {
		if n := strings.Count(logs.String(), what); n != want {
			t.Errorf("logged %q %d times, want %d:\n%s", what, n, want, logs.String())
		}
	}
}
