package oci

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestPullWeightImage: pulling a weight image (rather than the artifact it
// points at) is refused as bad input naming the artifact to pull and its
// mount directory, and the store holds nothing afterwards.
func TestPullWeightImage(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	art := remoteFor(t, f, "models/x:v1")
	pushed, err := Push(ctx, l, art, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	{
		img, err := BuildImage(ctx, remoteFor(t, f, "apps/x:v1"), ImageOptions{Base: Scratch, Weights: []WeightMount{{Ref: art.String(), Target: "/models/x"}}})
		if err != nil {
			t.Fatal(err)
		}
		d := storetest.Open(t)
		_, _, err = Pull(ctx, d, remoteFor(t, f, "apps/x:v1"), PullOptions{})
		if !errdefs.IsInvalidArgument(err) {
			t.Fatalf("pull of weight image %s: %v, want bad input", img.Reference, err)
		}
		for _, want := range []string{"is a weight image", pushed.Reference, "/models/x", "weightsnap pull " + pushed.Reference} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		if list, _ := d.List(ctx); len(list) != 0 {
			t.Errorf("the store holds %d artifacts after a refused pull", len(list))
		}
	}
}
