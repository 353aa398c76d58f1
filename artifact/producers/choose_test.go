package producers

import (
	"os"
	"path/filepath"
	"strings"
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
	vllm := &artifact.Identity{Producer: VLLMShardedRef(), Layout: artifact.Layout{Name: VLLMLayoutName(1 << 20), TPSize: 4, TPRank: 3},
		Representation: artifact.Representation{DType: "F16"}}
	// A spec named like the vLLM layout is still a spec: its layout name
	// ends in the spec's fingerprint, not in a part size.
	specNamedVLLM := &artifact.Identity{Producer: TPSplitRef(), Layout: artifact.Layout{Name: LayoutVLLMSharded + "+" + strings.Repeat("ab", 32), TPSize: 4, TPRank: 3},
		Representation: artifact.Representation{DType: "F16"}}
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
		{"vllm layout", Choice{TPSize: 4, TPRank: 3, DType: "F16", Layout: LayoutVLLMSharded, MaxPartSize: 1 << 20}, nil, TPSplitName, false},
		{"vllm layout without tp size is tp 1", Choice{Layout: LayoutVLLMSharded}, nil, TPSplitName, false},
		{"vllm layout with a spec", Choice{TPSize: 2, Layout: LayoutVLLMSharded, LayoutSpec: spec}, nil, "", true},
		{"unknown layout", Choice{TPSize: 2, Layout: "megatron", LayoutSpec: spec}, nil, "", true},
		{"part size without the vllm layout", Choice{TPSize: 2, LayoutSpec: spec, MaxPartSize: 10}, nil, "", true},
		{"negative part size", Choice{TPSize: 2, Layout: LayoutVLLMSharded, MaxPartSize: -1}, nil, "", true},
		{"the identity's vllm layout", Choice{}, vllm, TPSplitName, false},
		{"a spec named like the vllm layout", Choice{LayoutSpec: spec}, specNamedVLLM, TPSplitName, false},
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
			s, ok := r.(*TPSplit)
			if ok && tc.id != nil && (s.Size != 4 || s.Rank != 3 || s.DType != "F16") {
				t.Fatalf("split from the identity: %+v", s)
			}
			wantVLLM := tc.c.Layout == LayoutVLLMSharded || tc.id == vllm
			if ok && (wantVLLM != (s.Layout == LayoutVLLMSharded) || wantVLLM != (s.Spec == nil) || (wantVLLM && s.Size < 1)) {
				t.Fatalf("layout: %+v", s)
			}
			if ok && wantVLLM && tc.id == vllm && s.MaxPartSize != 1<<20 {
				t.Fatalf("part size from the identity: %d", s.MaxPartSize)
			}
		})
	}
}
