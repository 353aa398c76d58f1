package producers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// The rules this test checks the vllm-sharded layout against, from
// vllm-project/vllm (the commits read):
//
//   - names: ShardedStateLoader.DEFAULT_PATTERN
//     "model-rank-{rank}-part-{part}.safetensors" and the glob of
//     pattern.format(rank=rank, part="*") in load_weights
//     (vllm/model_executor/model_loader/sharded_state_loader.py @ 01ed47b4);
//   - parts: save_model closes a part before a tensor that would take it
//     past max_size, so an oversized first tensor leaves part 0 empty (same
//     function);
//   - tensors: the state dict in module order (vllm/model_executor/models/llama.py),
//     tied lm_head/embed_tokens filtered to "lm_head.weight" by
//     _filter_subtensors (sharded_state_loader.py); attention scales
//     _k/_v/_q/_prob_scale F32 1.0 (set_default_quant_scales(register_buffer=True),
//     vllm/model_executor/layers/attention/attention.py @ 71169c16);
//   - sharding: QKVParallelLinear (q by rank, k/v by rank //
//     num_kv_head_replicas), MergedColumnParallelLinear (gate, up by rank),
//     RowParallelLinear (dim 1) in vllm/model_executor/layers/linear.py @
//     0036d38d; VocabParallelEmbedding (vocabulary padded to 64, divided by
//     tp, zero rows at the end) in vocab_parallel_embedding.py; RMSNorm
//     replicated.

// vllmCase is one synthetic Llama-shaped model split for vLLM.
type vllmCase struct {
	name                 string
	tp                   int
	heads, kvHeads, voc  int
	tied                 bool
	shards               int
	srcDType, dtype      string
	maxPart              int64
	wantEmptyFirstPart   bool
	wantPartsAtLeastOnce int // the fewest parts some rank has
}

func TestVLLMShardedLayout(t *testing.T) {
	for _, tc := range []vllmCase{
		{name: "tp2 gqa vocab padded", tp: 2, heads: 4, kvHeads: 2, voc: 500, shards: 2, srcDType: "BF16", wantPartsAtLeastOnce: 1},
		{name: "tp4 kv replicated tied", tp: 4, heads: 4, kvHeads: 2, voc: 512, tied: true, shards: 3, srcDType: "F16", wantPartsAtLeastOnce: 1},
		{name: "tp2 small parts", tp: 2, heads: 4, kvHeads: 4, voc: 600, shards: 2, srcDType: "BF16",
			maxPart: 16 << 10, wantEmptyFirstPart: true, wantPartsAtLeastOnce: 4},
		{name: "tp1 cast to F32", tp: 1, heads: 2, kvHeads: 1, voc: 130, shards: 1, srcDType: "BF16", dtype: "F32", maxPart: 64 << 10, wantPartsAtLeastOnce: 2},
	} {
		t.Run(tc.name, func(t *testing.T) { checkVLLMCase(t, tc) })
	}
}

func checkVLLMCase(t *testing.T, tc vllmCase) {
	dir := t.TempDir()
	opts := synth.Options{Size: 300 << 10, Shards: tc.shards, DType: tc.srcDType, Seed: 7,
		Heads: tc.heads, KVHeads: tc.kvHeads, Vocab: tc.voc, Tied: tc.tied}
	if err := synth.Write(context.Background(), dir, opts); err != nil {
		t.Fatal(err)
	}
	m, _ := synth.Plan(opts)
	orig := sourceTensors(t, dir)
	src := scan(t, dir)
	maxPart := tc.maxPart
	if maxPart == 0 {
		maxPart = tpsplit.VLLMDefaultMaxPartSize
	}
	wantNames := stateDictNames(m.Layers, tc.tied)
	ranks := make([]map[string]artifact.WriteTensor, tc.tp)
	fewest := -1
	for rank := range tc.tp {
		r := &producers.TPSplit{Size: tc.tp, Rank: rank, DType: tc.dtype, Layout: producers.LayoutVLLMSharded, MaxPartSize: tc.maxPart}
		id, err := r.Identity(src, producers.Target{Revision: "sha256:" + fmt.Sprintf("%064x", 1)})
		if err != nil {
			t.Fatal(err)
		}
		if id.Layout.Name != producers.VLLMLayoutName(maxPart) || id.Layout.TPSize != tc.tp || id.Layout.TPRank != rank ||
			id.Producer != producers.VLLMShardedRef() {
			t.Fatalf("identity layout %+v producer %+v", id.Layout, id.Producer)
		}
		w, _ := produce(t, r, src)
		// Files: the rank's parts, numbered from 0, and the metadata files
		// but the shard index (save_sharded_state.py copies non-weight files).
		var parts []string
		for part := 0; ; part++ {
			if _, ok := w.Bytes(tpsplit.VLLMFileName(rank, part)); !ok {
				break
			}
			parts = append(parts, tpsplit.VLLMFileName(rank, part))
		}
		wantPaths := append(slices.Clone(parts), "config.json")
		slices.Sort(wantPaths)
		if got := w.Paths(); !slices.Equal(got, wantPaths) {
			t.Fatalf("rank %d wrote %v, want %v", rank, got, wantPaths)
		}
		if fewest < 0 || len(parts) < fewest {
			fewest = len(parts)
		}
		ranks[rank] = checkParts(t, w, parts, wantNames, maxPart, tc.wantEmptyFirstPart)
	}
	if fewest < tc.wantPartsAtLeastOnce {
		t.Fatalf("a rank has %d parts, want at least %d", fewest, tc.wantPartsAtLeastOnce)
	}
	checkShapes(t, ranks, m, tc)
	checkReassembly(t, ranks, orig, m, tc)
}

// stateDictNames is LlamaForCausalLM's state dict after _filter_subtensors.
func stateDictNames(layers int, tied bool) []string {
	names := []string{"model.embed_tokens.weight"}
	if tied {
		names[0] = "lm_head.weight" // the smaller key of the shared storage, at its first place
	}
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		names = append(names, p+"self_attn.qkv_proj.weight", p+"self_attn.o_proj.weight",
			p+"self_attn.attn._k_scale", p+"self_attn.attn._v_scale", p+"self_attn.attn._q_scale", p+"self_attn.attn._prob_scale",
			p+"mlp.gate_up_proj.weight", p+"mlp.down_proj.weight", p+"input_layernorm.weight", p+"post_attention_layernorm.weight")
	}
	names = append(names, "model.norm.weight")
	if !tied {
		names = append(names, "lm_head.weight")
	}
	return names
}

// checkParts reads a rank's parts: the tensors in state-dict order, split
// as save_model splits them; it returns them by name.
func checkParts(t *testing.T, w *storetest.MemWriter, parts, wantNames []string, maxPart int64, wantEmptyFirst bool) map[string]artifact.WriteTensor {
	t.Helper()
	got := map[string]artifact.WriteTensor{}
	var order []string
	var prev int64 // bytes of the previous part
	for i, p := range parts {
		raw, _ := w.Bytes(p)
		h, data := readTensors(t, raw)
		if h.Metadata != nil {
			t.Fatalf("%s: metadata %v (save_file writes none)", p, h.Metadata)
		}
		var size int64
		for _, ti := range h.Tensors {
			order = append(order, ti.Name)
			got[ti.Name] = artifact.WriteTensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: data[ti.Name]}
			size += ti.End - ti.Begin
		}
		switch {
		case i == 0 && len(h.Tensors) == 0:
			if !wantEmptyFirst {
				t.Fatalf("%s is empty", p)
			}
		case len(h.Tensors) == 0:
			t.Fatalf("%s is empty", p)
		case size > maxPart && len(h.Tensors) > 1:
			t.Fatalf("%s holds %d bytes in %d tensors, over %d", p, size, len(h.Tensors), maxPart)
		}
		if i == 0 && wantEmptyFirst && len(h.Tensors) != 0 {
			t.Fatalf("%s holds %d tensors; the first tensor is over max_size, so save_model writes part 0 empty", p, len(h.Tensors))
		}
		if i > 0 && len(h.Tensors) > 0 {
			first := h.Tensors[0]
			if prev+(first.End-first.Begin) <= maxPart {
				t.Fatalf("%s: %q (%d bytes) would have fit in the previous part (%d of %d bytes)", p, first.Name, first.End-first.Begin, prev, maxPart)
			}
		}
		prev = size
	}
	if !slices.Equal(order, wantNames) {
		t.Fatalf("tensors %v\nwant (state-dict order) %v", order, wantNames)
	}
	return got
}

// checkShapes checks every rank's shapes and dtypes against the sharding rules.
func checkShapes(t *testing.T, ranks []map[string]artifact.WriteTensor, m *synth.Model, tc vllmCase) {
	t.Helper()
	tp := int64(tc.tp)
	h, hd := int64(m.Hidden), int64(m.Hidden/m.Heads)
	nh, nkv := int64(m.Heads)/tp, max(int64(m.KVHeads)/tp, 1)
	ip := int64(m.Intermediate) / tp
	per := (int64(m.Vocab) + 63) / 64 * 64 / tp
	dtype := tc.srcDType
	if tc.dtype != "" {
		dtype = tc.dtype
	}
	want := map[string][]int64{"model.norm.weight": {h}, "lm_head.weight": {per, h}}
	if !tc.tied {
		want["model.embed_tokens.weight"] = []int64{per, h}
	}
	for i := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		want[p+"self_attn.qkv_proj.weight"] = []int64{(nh + 2*nkv) * hd, h}
		want[p+"self_attn.o_proj.weight"] = []int64{h, nh * hd}
		want[p+"mlp.gate_up_proj.weight"] = []int64{2 * ip, h}
		want[p+"mlp.down_proj.weight"] = []int64{h, ip}
		want[p+"input_layernorm.weight"] = []int64{h}
		want[p+"post_attention_layernorm.weight"] = []int64{h}
		for _, s := range []string{"_k_scale", "_v_scale", "_q_scale", "_prob_scale"} {
			want[p+"self_attn.attn."+s] = []int64{}
		}
	}
	for rank, got := range ranks {
		if len(got) != len(want) {
			t.Fatalf("rank %d: %d tensors, want %d", rank, len(got), len(want))
		}
		for name, shape := range want {
			g := got[name]
			wantDType := dtype
			if len(shape) == 0 {
				wantDType = "F32"
				if !bytes.Equal(g.Data, []byte{0, 0, 0x80, 0x3f}) {
					t.Fatalf("rank %d %s = % x, want F32 1.0", rank, name, g.Data)
				}
			}
			if !slices.Equal(g.Shape, shape) || g.DType != wantDType {
				t.Fatalf("rank %d %s: %s%v, want %s%v", rank, name, g.DType, g.Shape, wantDType, shape)
			}
		}
	}
}

// checkReassembly concatenates every rank's shards back into the
// checkpoint's tensors, which they must reproduce byte for byte (after the
// cast when one is asked for), with zero vocabulary padding and the
// replicated key/value heads identical on the ranks that share them.
func checkReassembly(t *testing.T, ranks []map[string]artifact.WriteTensor, orig map[string]artifact.WriteTensor, m *synth.Model, tc vllmCase) {
	t.Helper()
	tp := int64(tc.tp)
	h, hd := int64(m.Hidden), int64(m.Hidden/m.Heads)
	nh := int64(m.Heads) / tp
	kv, nkv := int64(m.KVHeads), max(int64(m.KVHeads)/tp, 1)
	replicas := max(tp/kv, 1)
	ip := int64(m.Intermediate) / tp
	expect := func(name string) []byte {
		o := orig[name]
		if tc.dtype == "" || tc.dtype == o.DType {
			return o.Data
		}
		out := make([]byte, len(o.Data)/cast.ElemSize(o.DType)*cast.ElemSize(tc.dtype))
		if err := cast.Convert(out, o.Data, o.DType, tc.dtype); err != nil {
			t.Fatal(err)
		}
		return out
	}
	esize := int64(len(expect("model.norm.weight"))) / h
	row := func(cols int64) int64 { return cols * esize }
	// rowsOf: rows [a, a+n) of a [*, cols] tensor.
	rowsOf := func(d []byte, cols, a, n int64) []byte { return d[a*row(cols) : (a+n)*row(cols)] }
	same := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: reassembled %d bytes differ from the checkpoint's %d", what, len(got), len(want))
		}
	}
	cat := func(f func(r map[string]artifact.WriteTensor) []byte) []byte {
		var out []byte
		for _, r := range ranks {
			out = append(out, f(r)...)
		}
		return out
	}
	vocabCheck := func(out, src string) {
		all := cat(func(r map[string]artifact.WriteTensor) []byte { return r[out].Data })
		v := int64(m.Vocab)
		same(out+" from "+src, all[:v*row(h)], expect(src))
		if tail := all[v*row(h):]; !bytes.Equal(tail, make([]byte, len(tail))) {
			t.Fatalf("%s: vocabulary padding rows are not zero", out)
		}
	}
	if tc.tied {
		vocabCheck("lm_head.weight", "model.embed_tokens.weight")
	} else {
		vocabCheck("model.embed_tokens.weight", "model.embed_tokens.weight")
		vocabCheck("lm_head.weight", "lm_head.weight")
	}
	same("model.norm.weight", ranks[len(ranks)-1]["model.norm.weight"].Data, expect("model.norm.weight"))
	for i := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		qkv := func(r map[string]artifact.WriteTensor) []byte { return r[p+"self_attn.qkv_proj.weight"].Data }
		same(p+"q_proj", cat(func(r map[string]artifact.WriteTensor) []byte { return rowsOf(qkv(r), h, 0, nh*hd) }), expect(p+"self_attn.q_proj.weight"))
		for j, n := range []string{"k_proj", "v_proj"} {
			off := nh*hd + int64(j)*nkv*hd
			var got []byte
			for rank, r := range ranks {
				shard := rowsOf(qkv(r), h, off, nkv*hd)
				if int64(rank)%replicas == 0 {
					got = append(got, shard...)
				} else {
					same(fmt.Sprintf("%s%s replica on rank %d", p, n, rank), shard, rowsOf(qkv(ranks[rank-rank%int(replicas)]), h, off, nkv*hd))
				}
			}
			same(p+n, got, expect(p+"self_attn."+n+".weight"))
		}
		gu := func(r map[string]artifact.WriteTensor) []byte { return r[p+"mlp.gate_up_proj.weight"].Data }
		same(p+"gate_proj", cat(func(r map[string]artifact.WriteTensor) []byte { return rowsOf(gu(r), h, 0, ip) }), expect(p+"mlp.gate_proj.weight"))
		same(p+"up_proj", cat(func(r map[string]artifact.WriteTensor) []byte { return rowsOf(gu(r), h, ip, ip) }), expect(p+"mlp.up_proj.weight"))
		for _, rp := range []struct {
			name string
			cols int64 // the full input dimension
		}{{"self_attn.o_proj.weight", int64(m.Heads) * hd}, {"mlp.down_proj.weight", int64(m.Intermediate)}} {
			// Row i of the full tensor is row i of every rank's shard, in rank order.
			var full []byte
			shard := rp.cols / tp
			for i := range h {
				for _, r := range ranks {
					full = append(full, rowsOf(r[p+rp.name].Data, shard, i, 1)...)
				}
			}
			same(p+rp.name, full, expect(p+rp.name))
		}
		for _, n := range []string{"input_layernorm.weight", "post_attention_layernorm.weight"} {
			for rank, r := range ranks {
				same(fmt.Sprintf("%s%s on rank %d", p, n, rank), r[p+n].Data, expect(p+n))
			}
		}
	}
}

// sourceTensors reads every tensor of a checkpoint directory.
func sourceTensors(t *testing.T, dir string) map[string]artifact.WriteTensor {
	t.Helper()
	out := map[string]artifact.WriteTensor{}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, data := readTensors(t, raw)
		for _, ti := range h.Tensors {
			out[ti.Name] = artifact.WriteTensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: data[ti.Name]}
		}
	}
	return out
}

// TestVLLMShardedRefusals: what vLLM's rules here do not cover is refused
// with a typed error when the identity is derived, before anything is built.
func TestVLLMShardedRefusals(t *testing.T) {
	base := func(t *testing.T, edit func(dir string)) *artifact.SourceDir {
		dir := t.TempDir()
		if err := synth.Write(context.Background(), dir, synth.Options{Size: 300 << 10, Shards: 1, DType: "BF16", Heads: 4}); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(dir)
		}
		return scan(t, dir)
	}
	config := func(doc string) func(string) {
		return func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const sizes = `"hidden_size":64,"num_attention_heads":4,"intermediate_size":256,"num_hidden_layers":1,"vocab_size":512`
	for _, tc := range []struct {
		name  string
		edit  func(string)
		split producers.TPSplit
		class func(error) bool
		arch  string // the architecture an ArchitectureError names, or a part of the message
	}{
		{"other architecture", config(`{"architectures":["MistralForCausalLM"],` + sizes + `}`), producers.TPSplit{Size: 2}, errdefs.IsNotImplemented, "MistralForCausalLM"},
		{"attention bias", config(`{"architectures":["LlamaForCausalLM"],"attention_bias":true,` + sizes + `}`), producers.TPSplit{Size: 2}, errdefs.IsNotImplemented, "attention_bias = true"},
		{"quantized", config(`{"architectures":["LlamaForCausalLM"],"quantization_config":{"quant_method":"fp8"},` + sizes + `}`), producers.TPSplit{Size: 2}, errdefs.IsNotImplemented, "quantized"},
		{"no config", func(dir string) { os.Remove(filepath.Join(dir, "config.json")) }, producers.TPSplit{Size: 2}, errdefs.IsInvalidArgument, "no config.json"},
		{"heads indivisible", nil, producers.TPSplit{Size: 3}, errdefs.IsInvalidArgument, "num_attention_heads 4 is not divisible by tp size 3"},
		{"a layout spec", nil, producers.TPSplit{Size: 2, Spec: &tpsplit.Spec{Name: "x"}}, errdefs.IsInvalidArgument, "layout spec does not apply"},
		{"negative part size", nil, producers.TPSplit{Size: 2, MaxPartSize: -1}, errdefs.IsInvalidArgument, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := base(t, tc.edit)
			s := tc.split
			s.Layout = producers.LayoutVLLMSharded
			_, err := s.Identity(src, producers.Target{Revision: "sha256:" + fmt.Sprintf("%064x", 1)})
			if err == nil || !tc.class(err) {
				t.Fatalf("got %v", err)
			}
			var ae *tpsplit.ArchitectureError
			if errors.As(err, &ae) != strings.HasSuffix(tc.arch, "ForCausalLM") || (ae != nil && ae.Architecture != tc.arch) {
				t.Fatalf("got %v, want an ArchitectureError naming %q", err, tc.arch)
			}
			if !strings.Contains(err.Error(), tc.arch) {
				t.Fatalf("got %v, want it to say %q", err, tc.arch)
			}
		})
	}
}

// TestVLLMIdentity: the layout name says which layout and part bound; the
// identity chooses the producer that remakes it; the weightsnap layout's
// identities are what they were.
func TestVLLMIdentity(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write(context.Background(), dir, synth.Options{Size: 300 << 10, Shards: 1, DType: "BF16", Heads: 4}); err != nil {
		t.Fatal(err)
	}
	src := scan(t, dir)
	target := producers.Target{Repository: "org/llama", Revision: "sha256:" + fmt.Sprintf("%064x", 2)}
	derive := func(s *producers.TPSplit) (artifact.Identity, string) {
		t.Helper()
		id, err := s.Identity(src, target)
		if err != nil {
			t.Fatal(err)
		}
		d, err := id.ID()
		if err != nil {
			t.Fatal(err)
		}
		return id, d.String()
	}
	vid, vd := derive(&producers.TPSplit{Size: 2, Rank: 1, Layout: producers.LayoutVLLMSharded, MaxPartSize: 1 << 20})
	if vid.Layout.Name != "vllm-sharded+max-part-1048576" {
		t.Fatalf("layout name %q", vid.Layout.Name)
	}
	if n, ok := producers.ParseVLLMLayoutName(vid.Layout.Name); !ok || n != 1<<20 {
		t.Fatalf("parsed %d %v", n, ok)
	}
	for _, bad := range []string{"vllm-sharded+max-part-", "vllm-sharded+max-part-0", "vllm-sharded+max-part-007", "vllm-sharded+" + strings.Repeat("ab", 32)} {
		if _, ok := producers.ParseVLLMLayoutName(bad); ok {
			t.Fatalf("%q parsed as a vLLM layout name", bad)
		}
	}
	if _, d := derive(&producers.TPSplit{Size: 2, Rank: 1, Layout: producers.LayoutVLLMSharded}); d == vd {
		t.Fatal("the part bound does not change the identity")
	}
	r, err := producers.Choose(producers.Choice{}, &vid)
	if err != nil {
		t.Fatal(err)
	}
	if again, d := derive(r.(*producers.TPSplit)); d != vd || again.Layout != vid.Layout {
		t.Fatalf("the identity's producer makes %s, want %s", d, vd)
	}
	spec, err := tpsplit.ParseSpec([]byte(engineSpec))
	if err != nil {
		t.Fatal(err)
	}
	old, od := derive(&producers.TPSplit{Spec: spec, Size: 2, Rank: 1})
	if _, d := derive(&producers.TPSplit{Spec: spec, Size: 2, Rank: 1, Layout: producers.LayoutWeightsnap}); d != od {
		t.Fatal("naming the weightsnap layout changes its identity")
	}
	if old.Producer != producers.TPSplitRef() || vid.Producer == old.Producer || vid.Producer.Name != producers.TPSplitName {
		t.Fatalf("producers %+v and %+v", old.Producer, vid.Producer)
	}
}
