package tpsplit

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

const testSpec = `
name = "llama-tp"
default = "replicated"

[[rule]]
pattern = "*.q_proj.weight"
split = "column"

[[rule]]
pattern = "*.q_proj.bias"
split = "column"

[[rule]]
pattern = "*.o_proj.*"      # weight and bias
split = "row"

[[rule]]
pattern = "re:.*\\.experts\\.w[13]"
split = "column"
dim = 1

[[rule]]
pattern = "*.experts.w2"
split = "row"
dim = -2

[[rule]]
pattern = "*.conv.weight"
split = "row"

[[rule]]
pattern = "*embed_tokens.weight"
split = "column"
pad_to_multiple = 64

[[rule]]
pattern = "lm_head.weight"
split = "column"
pad_to_multiple = 1

[[rule]]
pattern = "*.scales"
split = "replicated"
`

func mustSpec(t testing.TB, text string) *Spec {
	t.Helper()
	s, err := ParseSpec([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type tensorCase struct {
	name  string
	dtype string
	shape []int64
	// expected plan, independent of tpSize
	replicated bool
	dim        int
	pad        int64 // pad_to_multiple of the rule, 0 for none
}

var parityCases = []tensorCase{
	{"model.layers.0.self_attn.q_proj.weight", "F16", []int64{24, 16}, false, 0, 0},
	{"model.layers.0.self_attn.q_proj.bias", "F32", []int64{48}, false, 0, 0},
	{"model.layers.0.self_attn.o_proj.weight", "BF16", []int64{16, 24}, false, 1, 0},
	{"model.layers.0.self_attn.o_proj.bias", "F32", []int64{16}, true, -1, 0},
	{"model.layers.0.mlp.experts.w1", "I8", []int64{4, 24, 8}, false, 1, 0},
	{"model.layers.0.mlp.experts.w3", "F64", []int64{2, 48, 3}, false, 1, 0},
	{"model.layers.0.mlp.experts.w2", "U16", []int64{3, 24, 5}, false, 1, 0},
	{"model.layers.0.conv.weight", "I64", []int64{2, 3, 24}, false, 2, 0},
	{"model.embed_tokens.weight", "BF16", []int64{1001, 8}, false, 0, 64},
	{"model.tiny.embed_tokens.weight", "F32", []int64{5, 3}, false, 0, 64},
	{"lm_head.weight", "F8_E4M3", []int64{1001, 8}, false, 0, 1},
	{"model.norm.weight", "F32", []int64{16}, true, -1, 0},
	{"model.layers.0.scales", "F4", []int64{5}, true, -1, 0},
	{"model.empty.q_proj.weight", "F32", []int64{0, 4}, false, 0, 0},
	{"model.scalar", "F32", []int64{}, true, -1, 0},
}

func elemBytes(dtype string) int {
	dt, _ := artifact.LookupDType(dtype)
	return dt.Bits / 8
}

// reassemble concatenates the shards along dim element by element, using
// multi-index arithmetic (slow and independent of Extract), into the padded
// full tensor.
func reassemble(shards [][]byte, shardShape []int64, dim int, esize int) []byte {
	n := len(shards)
	full := slices.Clone(shardShape)
	full[dim] *= int64(n)
	numel := int64(1)
	for _, d := range full {
		numel *= d
	}
	out := make([]byte, numel*int64(esize))
	idx := make([]int64, len(full))
	for e := int64(0); e < numel; e++ {
		// decode e into idx (row-major) in the full padded shape
		r := e
		for k := len(full) - 1; k >= 0; k-- {
			idx[k] = r % full[k]
			r /= full[k]
		}
		rank := idx[dim] / shardShape[dim]
		local := slices.Clone(idx)
		local[dim] %= shardShape[dim]
		off := int64(0)
		for k := range shardShape {
			off = off*shardShape[k] + local[k]
		}
		copy(out[e*int64(esize):], shards[rank][off*int64(esize):(off+1)*int64(esize)])
	}
	return out
}

func TestParity(t *testing.T) {
	spec := mustSpec(t, testSpec)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range parityCases {
		for _, tp := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%s/tp%d", c.name, tp), func(t *testing.T) {
				p, err := spec.Plan(c.name, c.dtype, c.shape, tp)
				if err != nil {
					t.Fatal(err)
				}
				if p.Replicated != c.replicated || p.Dim != c.dim {
					t.Fatalf("plan: replicated %v dim %d, want %v %d", p.Replicated, p.Dim, c.replicated, c.dim)
				}
				src := make([]byte, p.SrcLen())
				for i := range src {
					src[i] = byte(r.IntN(255) + 1) // never zero, so padding is recognisable
				}
				shards := make([][]byte, tp)
				for rank := range tp {
					shards[rank] = bytes.Repeat([]byte{0xEE}, int(p.ShardLen(rank))) // dirty destination
					if err := p.Extract(shards[rank], src, rank); err != nil {
						t.Fatal(err)
					}
				}
				if c.replicated {
					for rank, s := range shards {
						if !bytes.Equal(s, src) || !slices.Equal(p.ShardShape(rank), c.shape) {
							t.Fatalf("rank %d: replicated shard differs", rank)
						}
					}
					return
				}
				size := c.shape[c.dim]
				wantPadded := size
				if c.pad > 0 {
					unit := c.pad * int64(tp)
					for wantPadded%unit != 0 {
						wantPadded++
					}
				}
				if p.PaddedSize != wantPadded || p.Size != size {
					t.Fatalf("sizes %d/%d, want %d/%d", p.Size, p.PaddedSize, size, wantPadded)
				}
				shape := p.ShardShape(0)
				if shape[c.dim]*int64(tp) != wantPadded || (c.pad > 0 && shape[c.dim]%c.pad != 0) {
					t.Fatalf("shard shape %v for padded size %d", shape, wantPadded)
				}
				for rank := range tp {
					if !slices.Equal(p.ShardShape(rank), shape) {
						t.Fatalf("rank %d: shard shape %v, want %v", rank, p.ShardShape(rank), shape)
					}
				}
				got := reassemble(shards, shape, c.dim, elemBytes(c.dtype))
				// Remove the padding: keep indices < size along dim; check the rest is zero.
				outer, inner := int64(1), int64(elemBytes(c.dtype))
				for _, d := range c.shape[:c.dim] {
					outer *= d
				}
				for _, d := range c.shape[c.dim+1:] {
					inner *= d
				}
				var unpadded []byte
				for o := int64(0); o < outer; o++ {
					row := got[o*wantPadded*inner : (o+1)*wantPadded*inner]
					unpadded = append(unpadded, row[:size*inner]...)
					if bytes.ContainsFunc(row[size*inner:], func(r rune) bool { return r != 0 }) {
						t.Fatalf("padding bytes are not zero")
					}
				}
				if !bytes.Equal(unpadded, src) {
					t.Fatalf("reassembled shards differ from the original tensor")
				}
			})
		}
	}
}

func TestPlanErrors(t *testing.T) {
	spec := mustSpec(t, testSpec)
	strict := mustSpec(t, "name = \"x\"\ndefault = \"error\"\n[[rule]]\npattern = \"*.w\"\nsplit = \"column\"\ndim = 2\n")
	cases := []struct {
		what  string
		spec  *Spec
		name  string
		dtype string
		shape []int64
		tp    int
		kind  error
	}{
		{"indivisible without padding", spec, "a.q_proj.weight", "F16", []int64{10, 16}, 4, errdefs.ErrInvalidArgument},
		{"indivisible row", spec, "a.o_proj.weight", "F16", []int64{16, 10}, 3, errdefs.ErrInvalidArgument},
		{"sub-byte split", spec, "a.q_proj.weight", "F4", []int64{24, 16}, 2, errdefs.ErrNotImplemented},
		{"sub-byte split tp1", spec, "a.o_proj.weight", "F6_E2M3", []int64{24, 16}, 1, errdefs.ErrNotImplemented},
		{"unknown dtype", spec, "a.q_proj.weight", "Q4_K", []int64{24, 16}, 2, errdefs.ErrInvalidArgument},
		{"tp size 0", spec, "a.q_proj.weight", "F16", []int64{24, 16}, 0, errdefs.ErrInvalidArgument},
		{"negative dim", spec, "a.q_proj.weight", "F16", []int64{-24, 16}, 2, errdefs.ErrInvalidArgument},
		{"column on 0-D", spec, "a.q_proj.weight", "F16", []int64{}, 2, errdefs.ErrInvalidArgument},
		{"dim override out of range", strict, "a.w", "F16", []int64{4, 4}, 2, errdefs.ErrInvalidArgument},
		{"default error", strict, "a.b", "F16", []int64{4, 4}, 2, errdefs.ErrInvalidArgument},
		{"shape overflow", spec, "a.b", "F64", []int64{1 << 31, 1 << 31, 4}, 2, errdefs.ErrInvalidArgument},
	}
	for _, c := range cases {
		_, err := c.spec.Plan(c.name, c.dtype, c.shape, c.tp)
		if !errors.Is(err, c.kind) || !strings.HasPrefix(err.Error(), "tpsplit: ") {
			t.Errorf("%s: got %v, want a tpsplit failure wrapping %v", c.what, err, c.kind)
		} else if !strings.HasPrefix(err.Error(), fmt.Sprintf("tpsplit: tensor %q: ", c.name)) {
			t.Errorf("%s: error %q does not name tensor %q", c.what, err, c.name)
		}
	}
}

func TestExtractErrors(t *testing.T) {
	spec := mustSpec(t, testSpec)
	p, err := spec.Plan("a.q_proj.weight", "BF16", []int64{8, 4}, 4)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := make([]byte, 64), make([]byte, 16)
	for _, c := range []struct {
		what     string
		dst, src []byte
		rank     int
	}{
		{"rank -1", dst, src, -1},
		{"rank = tp", dst, src, 4},
		{"short source", dst, src[:62], 0},
		{"long destination", make([]byte, 17), src, 0},
	} {
		err := p.Extract(c.dst, c.src, c.rank)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: got %v", c.what, err)
		}
	}
	if p.ShardLen(4) != -1 || p.ShardShape(-1) != nil || p.ShardLen(3) != 16 {
		t.Error("out-of-range rank not reported by ShardLen/ShardShape")
	}
}

func BenchmarkExtractRowBF16(b *testing.B) {
	spec := mustSpec(b, testSpec)
	p, err := spec.Plan("l.o_proj.weight", "BF16", []int64{8192, 8192}, 8)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, p.SrcLen())
	dst := make([]byte, p.ShardLen(3))
	b.SetBytes(int64(len(dst)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Extract(dst, src, 3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtractColumnBF16(b *testing.B) {
	spec := mustSpec(b, testSpec)
	p, err := spec.Plan("l.q_proj.weight", "BF16", []int64{8192, 8192}, 8)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, p.SrcLen())
	dst := make([]byte, p.ShardLen(3))
	b.SetBytes(int64(len(dst)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Extract(dst, src, 3); err != nil {
			b.Fatal(err)
		}
	}
}
