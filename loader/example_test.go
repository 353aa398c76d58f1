package loader_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/loader"
	"github.com/weightsnap/weightsnap/resolve"
)

// Example loads a tiny synthetic checkpoint into an in-memory model
// through the runtime (the first load builds the artifact, passthrough),
// publishes what the "engine" made of it after the load (post-load
// publication, tensor-map), and loads that artifact by its identity: a hit
// that restores the engine's tensors with no source read.
func Example() {
	ctx := context.Background()
	base, err := os.MkdirTemp("", "loader-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(base)

	// A checkpoint of two tensors, as a model directory holds it.
	src := filepath.Join(base, "model")
	tensors := []artifact.WriteTensor{
		{Name: "bias", DType: "U8", Shape: []int64{3}, Data: []byte{1, 2, 3}},
		{Name: "weight", DType: "U8", Shape: []int64{2, 2}, Data: []byte{10, 20, 30, 40}},
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		panic(err)
	}
	f, err := os.Create(filepath.Join(src, "model.safetensors"))
	if err != nil {
		panic(err)
	}
	if _, err := artifact.WriteSafetensors(f, tensors, nil); err != nil {
		panic(err)
	}
	if err := f.Close(); err != nil {
		panic(err)
	}

	rt, err := resolve.New(resolve.Config{Root: filepath.Join(base, "store"), Mode: resolve.Preferred,
		AllowLocalBuild: true, AllowPostLoadPublish: true})
	if err != nil {
		panic(err)
	}
	var want []artifact.TensorSpec
	for _, t := range tensors {
		want = append(want, artifact.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape})
	}
	l := loader.Loader[*loader.MapModel]{
		Restorer: loader.MapRestorer{},
		New:      func(context.Context) (*loader.MapModel, error) { return loader.NewMapModel(want), nil },
		Canonical: func(context.Context, string, *loader.MapModel) error {
			return fmt.Errorf("this example never falls back to the canonical source")
		},
	}
	target := producers.Target{Repository: "example/tiny", Revision: "0123456789abcdef0123456789abcdef01234567"}

	// 1. Load: resolve (built here from the checkpoint), restore into a fresh model.
	m, rep, err := loader.Load(ctx, rt, resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}}, l)
	if err != nil {
		panic(err)
	}
	fmt.Println("load:", rep.Outcome, m.Hydration(), m.Tensors["weight"])

	// 2. The engine transforms what it loaded (here it doubles the weight)
	// and publishes the result, under an identity that says so, for later
	// starts.
	engine := []artifact.WriteTensor{tensors[0], {Name: "weight", DType: "U8", Shape: []int64{2, 2}}}
	for _, b := range m.Tensors["weight"] {
		engine[1].Data = append(engine[1].Data, 2*b)
	}
	dir, _, err := artifact.ScanSource(ctx, src)
	if err != nil {
		panic(err)
	}
	identity, err := producers.Passthrough{}.Identity(dir, target)
	if err != nil {
		panic(err)
	}
	identity.Layout.Name = "engine-loaded"
	identity.Producer = loader.TensorMapRef()
	pub, err := rt.PublishAfterLoad(ctx, identity, &loader.TensorMap{Tensors: engine})
	if err != nil {
		panic(err)
	}
	fmt.Println("publish after load:", pub.Outcome)

	// 3. A later start asks for that identity: a hit, restored as published.
	m, rep, err = loader.Load(ctx, rt, resolve.Request{Identity: &identity, Source: src}, l)
	if err != nil {
		panic(err)
	}
	fmt.Println("load:", rep.Outcome, m.Hydration(), m.Tensors["weight"])
	// Output:
	// load: built complete [10 20 30 40]
	// publish after load: published
	// load: hit complete [20 40 60 80]
}
