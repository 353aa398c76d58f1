package resolve_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

const llamaSpec = `
name = "llama"
[[rule]]
pattern = "re:.*\\.self_attn\\.(q|k|v)_proj\\.weight"
split = "column"
[[rule]]
pattern = "*.self_attn.o_proj.weight"
split = "row"
[[rule]]
pattern = "*.mlp.gate_proj.weight"
split = "column"
[[rule]]
pattern = "*.mlp.up_proj.weight"
split = "column"
[[rule]]
pattern = "*.mlp.down_proj.weight"
split = "row"
[[rule]]
pattern = "model.embed_tokens.weight"
split = "column"
pad_to_multiple = 64
[[rule]]
pattern = "lm_head.weight"
split = "column"
pad_to_multiple = 64
`

// paddedSpec splits only the vocabulary-sized tensors, with padding: for
// tp 3 the last rank of the embedding holds padding rows, and the last rank
// of lm_head (split by its 256 columns, padded to 384) is padding only.
const paddedSpec = `
name = "vocab-padded"
[[rule]]
pattern = "model.embed_tokens.weight"
split = "column"
pad_to_multiple = 64
[[rule]]
pattern = "lm_head.weight"
split = "row"
dim = -1
pad_to_multiple = 64
`

// TestTPSplitParity: the tp-split artifacts of ranks 0..N-1, read through
// store leases and concatenated along each tensor's split dimension (padding
// dropped), equal the original tensors byte for byte; padding is zero.
func TestTPSplitParity(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 16<<20, 4)
	orig := sourceTensors(t, src)
	for _, tc := range []struct {
		spec  string
		size  int
		dtype string
	}{
		{llamaSpec, 2, ""},
		{llamaSpec, 4, ""},
		{paddedSpec, 3, ""},
		{llamaSpec, 2, "F32"}, // BF16 -> F32 widens exactly
	} {
		spec, err := tpsplit.ParseSpec([]byte(tc.spec))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s/tp%d/%s", spec.Name, tc.size, tc.dtype), func(t *testing.T) {
			rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required,
				AllowLocalBuild: true, Validation: store.FullChecksum})
			leases := make([]*store.Lease, tc.size)
			for rank := range tc.size {
				res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target,
					Local: &producers.TPSplit{Spec: spec, Size: tc.size, Rank: rank, DType: tc.dtype}})
				if err != nil {
					t.Fatal(err)
				}
				defer res.Close()
				if res.Report.Outcome != resolve.OutcomeBuilt || res.Lease.Identity().Layout.TPRank != rank {
					t.Fatalf("rank %d: %+v", rank, res.Report)
				}
				leases[rank] = res.Lease
			}
			for name, o := range orig {
				want, wantDType := o.Data, o.DType
				if tc.dtype != "" {
					want = make([]byte, len(o.Data)/cast.ElemSize(o.DType)*cast.ElemSize(tc.dtype))
					if err := cast.Convert(want, o.Data, o.DType, tc.dtype); err != nil {
						t.Fatal(err)
					}
					wantDType = tc.dtype
				}
				plan, err := spec.Plan(name, o.DType, o.Shape, tc.size)
				if err != nil {
					t.Fatal(err)
				}
				shards := make([][]byte, tc.size)
				for rank, l := range leases {
					view, e, err := l.Tensor(name)
					if err != nil {
						t.Fatal(err)
					}
					if e.DType != wantDType || !slices.Equal(e.Shape, plan.ShardShape(rank)) {
						t.Fatalf("%s rank %d: %s%v, want %s%v", name, rank, e.DType, e.Shape, wantDType, plan.ShardShape(rank))
					}
					shards[rank] = view
				}
				if plan.Replicated {
					for rank, s := range shards {
						if !bytes.Equal(s, want) {
							t.Fatalf("%s: replicated copy of rank %d differs", name, rank)
						}
					}
					continue
				}
				esize := int64(cast.ElemSize(wantDType))
				if got := concat(t, shards, o.Shape, plan.Dim, plan.Size, esize); !bytes.Equal(got, want) {
					t.Fatalf("%s: concatenated shards differ from the original", name)
				}
			}
		})
	}
}

// concat joins shards along dim, drops the padding past size, and checks
// the padding is zero.
func concat(t *testing.T, shards [][]byte, shape []int64, dim int, size, esize int64) []byte {
	outer, inner := int64(1), esize
	for _, d := range shape[:dim] {
		outer *= d
	}
	for _, d := range shape[dim+1:] {
		inner *= d
	}
	per := int64(len(shards[0])) / outer // bytes of one outer index in one shard
	out := make([]byte, 0, outer*size*inner)
	for o := range outer {
		var row []byte
		for _, s := range shards {
			row = append(row, s[o*per:(o+1)*per]...)
		}
		if slices.ContainsFunc(row[size*inner:], func(b byte) bool { return b != 0 }) {
			t.Fatalf("non-zero padding at outer index %d", o)
		}
		out = append(out, row[:size*inner]...)
	}
	return out
}

// castSource writes a checkpoint holding every value class: F32 specials,
// normals, subnormals, overflow, ties to even for both 16-bit formats and an
// exponent sweep; and every F16 and BF16 bit pattern.
func castSource(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	var f32 []uint32
	add := func(bits ...uint32) {
		for _, b := range bits {
			f32 = append(f32, b, b|0x80000000)
		}
	}
	add(0, 0x7f800000)                                              // zeros and infinities
	add(0x7fc00000, 0x7f800001, 0x7fbfffff, 0x7fc12345, 0x7fffffff) // quiet and signalling NaNs with payloads
	add(math.Float32bits(1), math.Float32bits(3.1415927), math.Float32bits(65504), math.Float32bits(1e10),
		math.Float32bits(65519.996), math.Float32bits(65520), 0x7f7fffff, 0x7f7f7fff, 0x7f7f8000) // normals and overflow
	add(0x00000001, 0x007fffff, 0x00400000, 0x007f8000, 0x00008000, 0x00018000)                         // F32 subnormals (BF16 subnormals and ties)
	add(0x33800000, 0x33000000, 0x33400000, 0x33c00000, 0x38800000, 0x387fc000, 0x387fe000, 0x387ff000) // F16 subnormal range and its ties
	add(0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff)                                                 // BF16 ties to even
	add(0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff)                                                 // F16 ties to even
	for e := uint32(0); e < 256; e++ {                                                                  // exponent sweep with tie and near-tie mantissas
		for _, m := range []uint32{0, 0x1000, 0x3000, 0x8000, 0x18000, 0x7fffff, 0x400fff, 0x401001} {
			add(e<<23 | m)
		}
	}
	x := uint32(12345)
	for range 20000 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		f32 = append(f32, x)
	}
	all16 := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(all16[2*i:], uint16(i))
	}
	f32raw := make([]byte, 4*len(f32))
	for i, b := range f32 {
		binary.LittleEndian.PutUint32(f32raw[4*i:], b)
	}
	ids := []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}
	tensors := []artifact.WriteTensor{
		{Name: "f32", DType: "F32", Shape: []int64{int64(len(f32))}, Data: f32raw},
		{Name: "f16", DType: "F16", Shape: []int64{256, 256}, Data: all16},
		{Name: "bf16", DType: "BF16", Shape: []int64{1 << 16}, Data: all16},
		{Name: "ids", DType: "I64", Shape: []int64{2}, Data: ids},
	}
	dir := filepath.Join(t.TempDir(), "cast-src")
	os.MkdirAll(dir, 0o755)
	var buf bytes.Buffer
	if _, err := artifact.WriteSafetensors(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{}
	for _, x := range tensors {
		raw[x.Name] = x.Data
	}
	return dir, raw
}

// TestCastParity: the cast producer's artifacts, read through store leases,
// match an independent reference conversion (float64 arithmetic with
// math.RoundToEven) for every value class.
func TestCastParity(t *testing.T) {
	src, raw := castSource(t)
	dtypes := map[string]string{"f32": "F32", "f16": "F16", "bf16": "BF16"}
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: true})
	for _, to := range []string{"F32", "F16", "BF16"} {
		t.Run(to, func(t *testing.T) {
			res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: &producers.Cast{DType: to}})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			if res.Report.Outcome != resolve.OutcomeBuilt || res.Lease.Identity().Representation.DType != to {
				t.Fatalf("%+v", res.Report)
			}
			for name, from := range dtypes {
				got, e, err := res.Lease.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if e.DType != to {
					t.Fatalf("%s: dtype %s", name, e.DType)
				}
				fs, ts := cast.ElemSize(from), cast.ElemSize(to)
				in := raw[name]
				for i := 0; i < len(in)/fs; i++ {
					src := readBits(in[i*fs:], fs)
					want := refConvert(src, from, to)
					if have := readBits(got[i*ts:], ts); have != want {
						t.Fatalf("%s -> %s: element %d (0x%x): got 0x%x, want 0x%x", from, to, i, src, have, want)
					}
				}
			}
			if ids, _, _ := res.Lease.Tensor("ids"); !bytes.Equal(ids, raw["ids"]) {
				t.Fatal("integer tensor changed by a cast")
			}
		})
	}
}

func readBits(b []byte, size int) uint32 {
	if size == 4 {
		return binary.LittleEndian.Uint32(b)
	}
	return uint32(binary.LittleEndian.Uint16(b))
}

// format is a binary floating-point format: exponent and mantissa bits.
type format struct{ exp, mant int }

var formats = map[string]format{"F32": {8, 23}, "F16": {5, 10}, "BF16": {8, 7}}

// refConvert is the reference conversion: the value decoded exactly to
// float64, rounded once to nearest even; a NaN keeps its sign and the high
// bits of its payload, with the quiet bit set.
func refConvert(bits uint32, from, to string) uint32 {
	if from == to {
		return bits
	}
	ff, tf := formats[from], formats[to]
	sign := bits >> (ff.exp + ff.mant)
	e := bits >> ff.mant & (1<<ff.exp - 1)
	m := bits & (1<<ff.mant - 1)
	tsign := sign << (tf.exp + tf.mant)
	if e == 1<<ff.exp-1 && m != 0 { // NaN
		// Align the payload to the target's mantissa (MSB-aligned), set the quiet bit.
		var p uint32
		if tf.mant >= ff.mant {
			p = m << (tf.mant - ff.mant)
		} else {
			p = m >> (ff.mant - tf.mant)
		}
		return tsign | (1<<tf.exp-1)<<tf.mant | 1<<(tf.mant-1) | p
	}
	bias := 1<<(ff.exp-1) - 1
	var v float64
	switch {
	case e == 1<<ff.exp-1:
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(float64(m), 1-bias-ff.mant)
	default:
		v = math.Ldexp(float64(1<<ff.mant|m), int(e)-bias-ff.mant)
	}
	return tsign | encode(v, tf)
}

// encode rounds a non-negative value to the format, to nearest even.
func encode(v float64, f format) uint32 {
	inf := uint32(1<<f.exp-1) << f.mant
	if math.IsInf(v, 1) {
		return inf
	}
	if v == 0 {
		return 0
	}
	bias := 1<<(f.exp-1) - 1
	emin := 1 - bias
	if v < math.Ldexp(1, emin) { // subnormal result, in units of 2^(emin-mant)
		return uint32(math.RoundToEven(math.Ldexp(v, f.mant-emin))) // 1<<mant is the smallest normal: still right
	}
	_, e2 := math.Frexp(v)
	e := e2 - 1
	m := math.RoundToEven(math.Ldexp(v, f.mant-e))
	if m == math.Ldexp(1, f.mant+1) {
		m /= 2
		e++
	}
	if e > bias {
		return inf
	}
	return uint32(e+bias)<<f.mant | (uint32(m) - 1<<f.mant)
}
