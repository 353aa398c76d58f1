package loader_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/loader"
	"github.com/weightsnap/weightsnap/store"
)

// TestMapRestorerContract: plan validates without mutating; commit runs
// once; a failed commit marks the model partial.
func TestMapRestorerContract(t *testing.T) {
	want := []artifact.TensorSpec{{Name: "a", DType: "F32", Shape: []int64{2}}, {Name: "b", DType: "U8", Shape: []int64{3}}}
	lease := fakeLease{"a": {1, 2, 3, 4, 5, 6, 7, 8}, "b": {9, 10, 11}}
	ctx := context.Background()

	m := loader.NewMapModel(want)
	plan, err := loader.MapRestorer{}.PlanRestore(ctx, lease, m)
	if err != nil || m.Tensors != nil || m.Hydration() != loader.HydrationEmpty {
		t.Fatalf("plan: %v, model %v %s", err, m.Tensors, m.Hydration())
	}
	if err := plan.Commit(ctx); err != nil || m.Hydration() != loader.HydrationComplete || !bytes.Equal(m.Tensors["b"], []byte{9, 10, 11}) {
		t.Fatalf("commit: %v %s", err, m.Hydration())
	}
	if err := plan.Commit(ctx); !errors.Is(err, loader.ErrCommitted) {
		t.Fatalf("second commit: %v", err)
	}
	if _, err := (loader.MapRestorer{}).PlanRestore(ctx, lease, m); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("plan into a hydrated model: %v", err)
	}

	bad := loader.NewMapModel([]artifact.TensorSpec{{Name: "a", DType: "F16", Shape: []int64{4}}})
	if _, err := (loader.MapRestorer{}).PlanRestore(ctx, lease, bad); !errdefs.IsInvalidArgument(err) || bad.Hydration() != loader.HydrationEmpty {
		t.Fatalf("mismatched plan: %v %s", err, bad.Hydration())
	}

	m = loader.NewMapModel(want)
	plan, _ = loader.MapRestorer{FailAfter: 1}.PlanRestore(ctx, lease, m)
	var re *loader.RestoreError
	if err := plan.Commit(ctx); !errors.As(err, &re) || re.Phase != "commit" || m.Hydration() != loader.HydrationPartial {
		t.Fatalf("failed commit: %v %s", err, m.Hydration())
	}
}

type fakeLease map[string][]byte

func (l fakeLease) Identity() artifact.Identity {
	return artifact.Identity{Producer: loader.TensorMapRef()}
}

func (l fakeLease) Tensor(name string) ([]byte, artifact.TensorEntry, error) {
	b, ok := l[name]
	if !ok {
		return nil, artifact.TensorEntry{}, errdefs.ErrNotFound
	}
	e := artifact.TensorEntry{Name: name, DType: "U8", Shape: []int64{int64(len(b))}}
	if name == "a" {
		e.DType, e.Shape = "F32", []int64{int64(len(b) / 4)}
	}
	return b, e, nil
}

// TestTensorMapProducer: tensor-map is POST_LOAD_ONLY and publishes the
// tensors it holds, as given, into one safetensors file of the store.
func TestTensorMapProducer(t *testing.T) {
	ctx := context.Background()
	x := artifact.WriteTensor{Name: "x", DType: "BF16", Shape: []int64{3}, Data: []byte{1, 2, 3, 4, 5, 6}}
	p := &loader.TensorMap{Tensors: []artifact.WriteTensor{x}}
	if p.Phase() != producers.PostLoadOnly {
		t.Fatal("tensor-map must be POST_LOAD_ONLY")
	}
	src := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _, err := artifact.ScanSource(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	identity, err := producers.Passthrough{}.Identity(dir, producers.Target{Revision: "0123456789abcdef0123456789abcdef01234567"})
	if err != nil {
		t.Fatal(err)
	}
	identity.Layout.Name, identity.Producer = "engine-loaded", loader.TensorMapRef()
	d, err := store.Open(ctx, filepath.Join(t.TempDir(), "root"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := d.GetOrBuild(ctx, identity, p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, e, err := l.Tensor("x")
	if err != nil || !bytes.Equal(got, x.Data) || e.DType != "BF16" {
		t.Fatalf("tensor x: %v %v %+v", err, got, e)
	}
	if files := l.Files(); len(files) != 1 || files[0].Entry.Path != "model.safetensors" {
		t.Fatalf("files %+v", files)
	}
}
