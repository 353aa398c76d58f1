package resolve_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// TestWarmHitDoesNoWork: a second resolve of the same identity (from a new
// runtime, as from another process) runs no producer and reads no source
// byte: the fingerprint comes from the cache and the artifact from the store.
func TestWarmHitDoesNoWork(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 2<<20, 3)
	spec, err := tpsplit.ParseSpec([]byte(llamaSpec))
	if err != nil {
		t.Fatal(err)
	}
	files := len(mustScan(t, src).Files)
	for _, rc := range []producers.Local{
		producers.Passthrough{},
		&producers.TPSplit{Spec: spec, Size: 2, Rank: 1},
		&producers.Cast{DType: "F32"},
		&producers.TPSplit{Spec: spec, Size: 2, Rank: 0, DType: "F16"},
	} {
		t.Run(rc.Name(), func(t *testing.T) {
			cfg := resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: true}
			req := resolve.Request{Source: src, Target: target, Local: rc}
			cold, err := newRuntime(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			cold.Close()
			c := cold.Report.Counters
			if cold.Report.Outcome != resolve.OutcomeBuilt || c.ProducerRuns != 1 || c.SourceBytesRead == 0 ||
				c.FingerprintMisses != files || cold.Report.BytesMoved == 0 {
				t.Fatalf("cold: %+v", cold.Report)
			}
			warm, err := newRuntime(t, cfg).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer warm.Close()
			w := warm.Report.Counters
			if warm.Report.Outcome != resolve.OutcomeHit || warm.Path != cold.Path || warm.Report.ID != cold.Report.ID ||
				w.ProducerRuns != 0 || w.SourceBytesRead != 0 || w.FingerprintHits != files || w.FingerprintMisses != 0 || warm.Report.BytesMoved != 0 {
				t.Fatalf("warm: %+v", warm.Report)
			}
			// With the identity in hand, a warm resolve does not even fingerprint.
			id := warm.Lease.Identity()
			byID, err := newRuntime(t, cfg).Resolve(context.Background(), resolve.Request{Identity: &id, Source: src, Local: rc})
			if err != nil {
				t.Fatal(err)
			}
			defer byID.Close()
			if b := byID.Report.Counters; byID.Report.Outcome != resolve.OutcomeHit || b.FingerprintFiles != 0 || b.SourceBytesRead != 0 {
				t.Fatalf("by identity: %+v", byID.Report)
			}
		})
	}
}

// TestReportJSON: one terminal report with the promised fields.
func TestReportJSON(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), AllowLocalBuild: true})
	res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	raw, err := res.Report.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	json.Unmarshal(raw, &doc)
	var keys []string
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range []string{"identity", "mode", "outcome", "source", "path", "bytes_moved", "duration_ns", "steps", "counters"} {
		if _, ok := doc[k]; !ok {
			t.Fatalf("report lacks %q: %s", k, raw)
		}
	}
	steps := doc["steps"].([]any)
	var names []string
	for _, s := range steps {
		names = append(names, s.(map[string]any)["name"].(string))
	}
	if want := []string{resolve.StepDomain, resolve.StepFingerprint, resolve.StepLookup, resolve.StepProduce}; !reflect.DeepEqual(names, want) {
		t.Fatalf("steps %v, want %v", names, want)
	}
	// A failure carries its retryable flag.
	rt2 := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required})
	res2, _ := rt2.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}})
	raw, _ = res2.Report.JSON()
	var failed struct {
		Outcome string `json:"outcome"`
		Failure struct {
			Kind      string `json:"kind"`
			Retryable *bool  `json:"retryable"`
		} `json:"failure"`
	}
	if err := json.Unmarshal(raw, &failed); err != nil || failed.Outcome != "failed" || failed.Failure.Kind != "miss" || failed.Failure.Retryable == nil {
		t.Fatalf("failure report: %s", raw)
	}
}

// TestRestoreCommitFailureFallsBackOnFreshModel: a commit that fails marks
// its model partial; preferred mode loads the canonical source into a fresh
// model and never returns the partial one; required mode fails.
func TestRestoreCommitFailureFallsBackOnFreshModel(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 1<<20, 2)
	orig := sourceTensors(t, src)
	var want []artifact.TensorSpec
	for name, x := range orig {
		want = append(want, artifact.TensorSpec{Name: name, DType: x.DType, Shape: x.Shape})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Name < want[j].Name })
	canonicalLoad := func(ctx context.Context, dir string, m *producers.MapModel) error {
		m.Tensors = map[string][]byte{}
		for name, x := range sourceTensors(t, dir) {
			m.Tensors[name] = append([]byte(nil), x.Data...)
		}
		m.MarkComplete()
		return nil
	}
	for _, tc := range []struct {
		name      string
		mode      resolve.Mode
		restorer  producers.MapRestorer
		modelWant []artifact.TensorSpec
		outcome   resolve.Outcome
		kind      resolve.Kind // the terminal or recovered failure
		models    int          // models made
	}{
		{"commit ok", resolve.Preferred, producers.MapRestorer{}, want, resolve.OutcomeHit, "", 1},
		{"commit fails, preferred", resolve.Preferred, producers.MapRestorer{FailAfter: 3}, want, resolve.OutcomeCanonical, resolve.KindRestoreCommit, 2},
		{"commit fails, required", resolve.Required, producers.MapRestorer{FailAfter: 3}, want, resolve.OutcomeFailed, resolve.KindRestoreCommit, 1},
		{"plan fails: visible, model untouched", resolve.Preferred, producers.MapRestorer{},
			append([]artifact.TensorSpec{{Name: "missing", DType: "BF16", Shape: []int64{1}}}, want...), resolve.OutcomeFailed, resolve.KindRestorePlan, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			req := resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}}
			pub, err := newRuntime(t, resolve.Config{Root: root, AllowLocalBuild: true}).Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			pub.Close()
			var made []*producers.MapModel
			loader := resolve.Loader[*producers.MapModel]{
				Restorer: tc.restorer,
				New: func(context.Context) (*producers.MapModel, error) {
					m := producers.NewMapModel(tc.modelWant)
					made = append(made, m)
					return m, nil
				},
				Canonical: canonicalLoad,
			}
			rt := newRuntime(t, resolve.Config{Root: root, Mode: tc.mode})
			m, rep, err := resolve.Load(context.Background(), rt, req, loader)
			if rep.Outcome != tc.outcome || len(made) != tc.models {
				t.Fatalf("outcome %s, %d models: %v %+v", rep.Outcome, len(made), err, rep)
			}
			switch tc.outcome {
			case resolve.OutcomeFailed:
				var f *resolve.Failure
				if !errors.As(err, &f) || f.Kind != tc.kind || m != nil {
					t.Fatalf("got model %p, %v", m, err)
				}
				wantState := artifact.HydrationPartial
				if tc.kind == resolve.KindRestorePlan {
					wantState = artifact.HydrationEmpty
				}
				if made[0].Hydration() != wantState {
					t.Fatalf("failed model is %s, want %s", made[0].Hydration(), wantState)
				}
				return
			case resolve.OutcomeCanonical:
				if rep.Recovered[len(rep.Recovered)-1].Kind != tc.kind {
					t.Fatalf("recovered %v", rep.Recovered)
				}
				if made[0].Hydration() != artifact.HydrationPartial || m == made[0] || m != made[1] {
					t.Fatal("the fallback did not use a fresh model")
				}
			}
			if err != nil || m.Hydration() != artifact.HydrationComplete || len(m.Tensors) != len(orig) {
				t.Fatalf("model %s with %d tensors: %v", m.Hydration(), len(m.Tensors), err)
			}
			for name, x := range orig {
				if string(m.Tensors[name]) != string(x.Data) {
					t.Fatalf("tensor %s differs", name)
				}
			}
			// The lease was released: the artifact can be removed.
			d, err := store.Open(context.Background(), root, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Remove(context.Background(), rep.ID); err != nil {
				t.Fatalf("lease still held: %v", err)
			}
		})
	}
}

func TestPublishAfterLoad(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	orig := sourceTensors(t, src)
	var tensors []artifact.WriteTensor
	for _, x := range orig {
		tensors = append(tensors, x)
	}
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	postLoad := &producers.TensorMap{Tensors: tensors}
	identity := func() artifact.Identity {
		id := identityOf(t, producers.Passthrough{}, src)
		id.Representation.DType = "BF16"
		id.Layout.Name = "engine-loaded"
		id.Producer = producers.TensorMapRef()
		return id
	}()

	for _, tc := range []struct {
		name    string
		allow   bool
		p       producers.PhasedProducer
		outcome resolve.Outcome
		kind    resolve.Kind
	}{
		{"gated off", false, postLoad, resolve.OutcomeSkipped, resolve.KindPolicy},
		{"pre-load producer refused", true, preLoad{postLoad}, resolve.OutcomeFailed, resolve.KindUnsupported},
		{"published", true, postLoad, resolve.OutcomePublished, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			rt := newRuntime(t, resolve.Config{Root: root, AllowLocalBuild: true, AllowPostLoadPublish: tc.allow})
			res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			before, _ := res.Report.JSON()
			rep, err := rt.PublishAfterLoad(context.Background(), identity, tc.p)
			if rep.Outcome != tc.outcome || rep.Kind != resolve.ReportPostLoadPublish {
				t.Fatalf("%v %+v", err, rep)
			}
			if tc.kind != "" {
				var f *resolve.Failure
				if !errors.As(err, &f) || f.Kind != tc.kind || rep.Failure != f {
					t.Fatalf("failure %v", err)
				}
			}
			if after, _ := res.Report.JSON(); string(after) != string(before) {
				t.Fatal("post-load publication changed the completed resolution's report")
			}
			if tc.outcome != resolve.OutcomePublished {
				return
			}
			if _, err := os.Stat(rep.Path); err != nil {
				t.Fatal(err)
			}
			// Its lease is closed: nothing holds the published artifact.
			d, _ := store.Open(context.Background(), root, nil)
			if err := d.Remove(context.Background(), rep.ID); err != nil {
				t.Fatalf("publication kept a lease: %v", err)
			}
			if rep2, err := rt.PublishAfterLoad(context.Background(), identity, postLoad); err != nil || rep2.Outcome != resolve.OutcomePublished {
				t.Fatalf("republish: %v %+v", err, rep2)
			}
			if rep3, err := rt.PublishAfterLoad(context.Background(), identity, postLoad); err != nil || rep3.Outcome != resolve.OutcomePresent {
				t.Fatalf("publish of a present artifact: %v %+v", err, rep3)
			}
		})
	}
}

// preLoad disguises a producer as PRE_LOAD_SAFE.
type preLoad struct{ *producers.TensorMap }

func (preLoad) Phase() producers.Phase { return producers.PreLoadSafe }

// TestPostLoadOnlyNeverRunsInResolution: a POST_LOAD_ONLY local producer is skipped
// by pre-load resolution, and allow_local_build gates PRE_LOAD_SAFE ones.
func TestPostLoadOnlyNeverRunsInResolution(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	ran := false
	post := &testLocal{name: "post", phase: producers.PostLoadOnly, produce: func(context.Context, artifact.Writer) error {
		ran = true
		return nil
	}}
	for _, tc := range []struct {
		name   string
		local  producers.Local
		allow  bool
		detail string
	}{
		{"post-load only", post, true, "POST_LOAD_ONLY producers run only after a load"},
		{"allow_local_build off", producers.Passthrough{}, false, "allow_local_build is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: tc.allow})
			res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: tc.local})
			if !errdefs.IsNotFound(err) || ran || res.Report.Counters.ProducerRuns != 0 {
				t.Fatalf("%v, ran %v", err, ran)
			}
			steps := res.Report.Steps
			last, canon := steps[len(steps)-2], steps[len(steps)-1] // required mode: the canonical source is skipped last
			if last.Name != resolve.StepProduce || last.Outcome != resolve.StepSkipped || last.Detail != tc.detail ||
				canon.Name != resolve.StepCanonical || canon.Outcome != resolve.StepSkipped {
				t.Fatalf("last steps %+v", steps[len(steps)-2:])
			}
		})
	}
}

// TestInvalidIdentityIsVisible: an identity that does not validate (a
// branch name for a revision) fails the request even in preferred mode.
func TestInvalidIdentityIsVisible(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), AllowLocalBuild: true})
	id := identityOf(t, producers.Passthrough{}, src)
	id.Model.Revision = "main" // not immutable
	res, err := rt.Resolve(context.Background(), resolve.Request{Identity: &id, Source: src})
	var f *resolve.Failure
	if !errors.As(err, &f) || f.Kind != resolve.KindInvalidRequest || res.Report.Outcome != resolve.OutcomeFailed {
		t.Fatalf("%v", err)
	}
}

// TestRegisteredProducerBuildsGivenIdentity: with only an identity and a
// source, the registered producer that makes exactly that identity builds
// it; one that makes another identity is skipped.
func TestRegisteredProducerBuildsGivenIdentity(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 512<<10, 2)
	id := identityOf(t, &producers.Cast{DType: "F32"}, src)
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: true,
		Producers: []producers.Local{&producers.Cast{DType: "F16"}, producers.Passthrough{}, &producers.Cast{DType: "F32"}}})
	var told []string
	var progress artifact.ProgressReporter
	onProduce := func(source string, p artifact.Producer) {
		told = append(told, source)
		progress, _ = p.(artifact.ProgressReporter)
	}
	res, err := rt.Resolve(context.Background(), resolve.Request{Identity: &id, Source: src, OnProduce: onProduce})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	// The caller was told of the producer that ran and can follow it: it
	// read some of its source, which it knows the size of.
	var size int64
	filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if info, ierr := e.Info(); err == nil && ierr == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
		return nil
	})
	if len(told) != 1 || told[0] != "producer:cast" || progress == nil {
		t.Fatalf("told %v, progress %v", told, progress)
	}
	if done, total := progress.Progress(); done == 0 || total != size {
		t.Fatalf("progress %d of %d, want some of %d", done, total, size)
	}
	var skipped, built int
	for _, s := range res.Report.Steps {
		if s.Name == resolve.StepProduce && s.Outcome == resolve.StepSkipped {
			skipped++
		}
		if s.Name == resolve.StepProduce && s.Outcome == resolve.StepOK {
			built++
		}
	}
	if res.Report.Outcome != resolve.OutcomeBuilt || res.Report.Source != "producer:cast" || skipped != 1 || built != 1 {
		t.Fatalf("%+v", res.Report)
	}
}
