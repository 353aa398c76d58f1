package producers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

func TestChoose(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "spec.toml")
	os.WriteFile(spec, []byte("name = \"t\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n"), 0o644)
	split := &artifact.Identity{Producer: artifact.ProducerRef{Name: TPSplitName}, Layout: artifact.Layout{TPSize: 4, TPRank: 3},
		Representation: artifact.Representation{DType: "F16"}}
	unknown := &artifact.Identity{Producer: artifact.ProducerRef{Name: "oci-pull"}}
	for _, tc := range []struct {
		name string
		c    Choice
		id   *artifact.Identity
		want string // the local producer's name; "" for none
		err  bool
	}{
		{"nothing asked", Choice{}, nil, artifact.PassthroughName, false},
		{"source dtype", Choice{DType: "source"}, nil, artifact.PassthroughName, false},
		{"cast", Choice{DType: "F16"}, nil, CastName, false},
		{"split", Choice{TPSize: 2, TPRank: 1, LayoutSpec: spec}, nil, TPSplitName, false},
		{"split without spec", Choice{TPSize: 2}, nil, "", true},
		{"the identity's producer", Choice{LayoutSpec: spec}, split, TPSplitName, false},
		{"an identity no local producer makes", Choice{}, unknown, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Choose(tc.c, tc.id)
			if tc.err {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil || (r == nil) != (tc.want == "") || (r != nil && r.Name() != tc.want) {
				t.Fatalf("%v %v, want %s", r, err, tc.want)
			}
			if s, ok := r.(*TPSplit); ok && tc.id != nil && (s.Size != 4 || s.Rank != 3 || s.DType != "F16") {
				t.Fatalf("split from the identity: %+v", s)
			}
		})
	}
}
