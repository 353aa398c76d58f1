package oci

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/pointer"
)

// TestImageBuildHF: with the hf layout, pointers carry the layout and the
// repo id (the artifact's repository, or the one given) and several
// artifacts share one cache root, each in its repository folder; what
// cannot be laid out is refused as invalid input.
func TestImageBuildHF(t *testing.T) {
	ctx := context.Background()
	f := newFakeRegistry(t)
	var refs []string
	for i, repo := range []string{storetest.Repository, ""} { // the second names no repository
		_, src := storetest.CheckpointOf(t, synth.Options{Size: 256 << 10, Shards: 2, DType: "BF16", Seed: uint64(50 + i)})
		d := storetest.Open(t)
		l, _, err := d.GetOrBuild(ctx, artifact.PassthroughIdentity(src, repo, storetest.Revision, "", 0, 0), &artifact.Passthrough{Src: src})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		art := remoteFor(t, f, []string{"models/a:v1", "models/b:v1"}[i])
		if _, err := Push(ctx, l, art, PushOptions{}); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, art.String())
	}
	hf := pointer.LayoutHF
	for _, tc := range []struct {
		name  string
		o     ImageOptions
		views []string // the pointers' view directories; nil: refused
	}{
		{"two repos in one cache", ImageOptions{Layout: hf, Weights: []WeightMount{{Ref: refs[0], Target: "/hub"}, {Ref: refs[1], Target: "/hub", Repo: "org/b"}}},
			[]string{"/hub/models--org--model", "/hub/models--org--b"}},
		{"repo given overrides", ImageOptions{Layout: hf, Weights: []WeightMount{{Ref: refs[0], Target: "/hub", Repo: "gpt2"}}}, []string{"/hub/models--gpt2"}},
		{"no repository and none given", ImageOptions{Layout: hf, Weights: []WeightMount{{Ref: refs[1], Target: "/hub"}}}, nil},
		{"one repo twice", ImageOptions{Layout: hf, Weights: []WeightMount{{Ref: refs[0], Target: "/hub", Repo: "org/x"}, {Ref: refs[1], Target: "/hub", Repo: "org/x"}}}, nil},
		{"bad repo id", ImageOptions{Layout: hf, Weights: []WeightMount{{Ref: refs[0], Target: "/hub", Repo: "org/../x"}}}, nil},
		{"repo without layout", ImageOptions{Weights: []WeightMount{{Ref: refs[0], Target: "/hub", Repo: "org/x"}}}, nil},
		{"unknown layout", ImageOptions{Layout: "diffusers", Weights: []WeightMount{{Ref: refs[0], Target: "/hub", Repo: "org/x"}}}, nil},
		{"two flat artifacts at one target", ImageOptions{Weights: []WeightMount{{Ref: refs[0], Target: "/w"}, {Ref: refs[1], Target: "/w"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := BuildImage(ctx, remoteFor(t, f, "apps/hf:v1"), tc.o)
			if tc.views == nil {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("err %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var views []string
			for _, p := range rep.Pointers {
				if p.Layout != hf {
					t.Fatalf("pointer %+v has no layout", p)
				}
				views = append(views, pointer.ViewDir(p))
			}
			if !slices.Equal(views, tc.views) {
				t.Fatalf("views %v, want %v", views, tc.views)
			}
		})
	}
}

// TestPointerLayerHF: an hf pointer layer's labels carry the layout and the
// repo id, and its files sit in the repository folder, so the cache root
// holds nothing but repository folders.
func TestPointerLayerHF(t *testing.T) {
	p := pointer.Pointer{Artifact: "127.0.0.1:5000/models/x@sha256:" + zeros, ID: artifact.MustParseID(testIdentity), Target: "/hub",
		Layout: pointer.LayoutHF, Repo: "meta-llama/Llama-3.1-8B"}
	pl, err := NewPointerLayer(p)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := PointerFromAnnotations(pl.Desc)
	if !ok || err != nil || got.Layout != p.Layout || got.Repo != p.Repo || got.Target != "/hub" {
		t.Fatalf("annotations read back as %+v %v %v", got, ok, err)
	}
	folder := "hub/models--meta-llama--Llama-3.1-8B"
	want := []string{"hub/", folder + "/", folder + "/.weightsnap/", folder + "/.weightsnap/pointers/",
		folder + "/.weightsnap/pointers/" + p.ID.Hex() + ".json", folder + "/" + pointer.NoticeName}
	var names []string
	for _, e := range readTar(t, pl.Tar) {
		names = append(names, e.hdr.Name)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("pointer layer holds %v, want %v", names, want)
	}
}
