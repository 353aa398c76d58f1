package tpsplit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// # vLLM's sharded-state layout
//
// VLLMLlama plans what vLLM's ShardedStateLoader.save_model writes for one
// tensor-parallel rank of a LlamaForCausalLM: the rank's model state dict,
// under vLLM's parameter names, in state-dict order, after
// _filter_subtensors. The rules, and where vLLM has them (vllm-project/vllm;
// the commits are those read for this implementation):
//
//   - file names "model-rank-{rank}-part-{part}.safetensors"
//     (ShardedStateLoader.DEFAULT_PATTERN, and the loader's glob of
//     pattern.format(rank=rank, part="*") in load_weights;
//     vllm/model_executor/model_loader/sharded_state_loader.py @ 01ed47b4);
//   - parts: tensors are added in state-dict order and a part is closed
//     before a tensor that would take it past max_size bytes (save_model,
//     same file); max_size defaults to 5 GiB in
//     examples/offline_inference/save_sharded_state.py @ 173f36bf
//     (--max-file-size);
//   - tied embeddings: lm_head.weight is embed_tokens.weight
//     (ParallelLMHead.tie_weights,
//     vllm/model_executor/layers/vocab_parallel_embedding.py), so both keys
//     share one storage and _filter_subtensors keeps only the smaller key,
//     "lm_head.weight", at the place of the first ("model.embed_tokens.weight");
//     tensors with no elements are dropped by it too;
//   - qkv_proj = [q shard; k shard; v shard] on dim 0; q shard r of
//     num_heads/tp heads; k and v shard tp_rank // num_kv_head_replicas of
//     max(1, num_kv_heads/tp) heads (QKVParallelLinear.__init__ and
//     .weight_loader, vllm/model_executor/layers/linear.py @ 0036d38d);
//   - gate_up_proj = [gate shard r; up shard r] of intermediate/tp rows
//     (MergedColumnParallelLinear.weight_loader, same file);
//   - o_proj and down_proj: row parallel, shard r of the input dimension,
//     dim 1 (RowParallelLinear.weight_loader, same file);
//   - embed_tokens and lm_head: vocabulary parallel on dim 0, the vocabulary
//     padded to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE, pad_vocab_size)
//     and divided by tp; rank r holds rows [r*per, min((r+1)*per, vocab)) and
//     zero rows after them (VocabParallelEmbedding._get_indices and
//     .weight_loader, vocab_parallel_embedding.py);
//   - norms replicated (RMSNorm.weight);
//   - every attention layer's persistent buffers _k_scale, _v_scale,
//     _q_scale and _prob_scale, F32 scalars 1.0, registered after the
//     layer's weights (set_default_quant_scales(layer, register_buffer=True)
//     from _init_kv_cache_quant,
//     vllm/model_executor/layers/attention/attention.py @ 71169c16); the
//     rotary embedding's cos_sin_cache is not persistent and not saved;
//   - module order: embed_tokens, then per layer self_attn (qkv_proj, o_proj,
//     attn) and mlp (gate_up_proj, down_proj), input_layernorm,
//     post_attention_layernorm; then norm and lm_head
//     (vllm/model_executor/models/llama.py); checkpoint tensors vLLM skips
//     (rotary_emb.inv_freq, rotary_emb.cos_cached/sin_cached, lm_head.* when
//     tied) are skipped.

// VLLMDefaultMaxPartSize is save_sharded_state.py's --max-file-size default.
const VLLMDefaultMaxPartSize = 5 << 30

// VLLMVocabPadding is vLLM's DEFAULT_VOCAB_PADDING_SIZE.
const VLLMVocabPadding = 64

// VLLMFileName is the name of rank's part file (DEFAULT_PATTERN).
func VLLMFileName(rank, part int) string {
	return fmt.Sprintf("model-rank-%d-part-%d.safetensors", rank, part)
}

// VLLMArchitecture is the one architecture VLLMLlama maps.
const VLLMArchitecture = "LlamaForCausalLM"

// ArchitectureError is a checkpoint whose architecture has no vLLM
// sharded-state mapping here; it is errdefs.ErrNotImplemented.
type ArchitectureError struct {
	Architecture string
}

func (e *ArchitectureError) Error() string {
	return fmt.Sprintf("tpsplit: vLLM sharded-state layout of architecture %q is not implemented (only %s)", e.Architecture, VLLMArchitecture)
}

// Unwrap classifies the error as not implemented.
func (e *ArchitectureError) Unwrap() error { return errdefs.ErrNotImplemented }

// LlamaConfig is what the mapping reads of a Hugging Face config.json.
type LlamaConfig struct {
	Hidden, Heads, KVHeads, HeadDim, Intermediate, Layers, Vocab int64
	// Tied is tie_word_embeddings.
	Tied bool
}

// maxDim bounds every size read from config.json, so products of two stay
// far from overflowing.
const maxDim = 1 << 24

// ParseLlamaConfig reads config.json. An architecture other than
// LlamaForCausalLM is an *ArchitectureError; biases and quantization are
// not implemented; missing or out-of-range sizes are invalid.
func ParseLlamaConfig(raw []byte) (*LlamaConfig, error) {
	var f struct {
		Architectures      []string        `json:"architectures"`
		Hidden             *int64          `json:"hidden_size"`
		Heads              *int64          `json:"num_attention_heads"`
		KVHeads            *int64          `json:"num_key_value_heads"`
		HeadDim            *int64          `json:"head_dim"`
		Intermediate       *int64          `json:"intermediate_size"`
		Layers             *int64          `json:"num_hidden_layers"`
		Vocab              *int64          `json:"vocab_size"`
		Tied               *bool           `json:"tie_word_embeddings"`
		AttentionBias      *bool           `json:"attention_bias"`
		Bias               *bool           `json:"bias"`
		QKVBias            *bool           `json:"qkv_bias"`
		MLPBias            *bool           `json:"mlp_bias"`
		QuantizationConfig json.RawMessage `json:"quantization_config"`
	}
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&f); err != nil {
		return nil, invalid("", "config.json: %v", err)
	}
	switch {
	case len(f.Architectures) == 0:
		return nil, invalid("", "config.json names no architecture")
	case len(f.Architectures) > 1:
		return nil, &ArchitectureError{Architecture: strings.Join(f.Architectures, ",")}
	case f.Architectures[0] != VLLMArchitecture:
		return nil, &ArchitectureError{Architecture: f.Architectures[0]}
	}
	for key, b := range map[string]*bool{"attention_bias": f.AttentionBias, "bias": f.Bias, "qkv_bias": f.QKVBias, "mlp_bias": f.MLPBias} {
		if b != nil && *b {
			return nil, failure("", "config.json: "+key+" = true: Llama biases are not implemented in the vLLM sharded-state layout", errdefs.ErrNotImplemented)
		}
	}
	if q := bytes.TrimSpace(f.QuantizationConfig); len(q) > 0 && !bytes.Equal(q, []byte("null")) {
		return nil, failure("", "config.json: quantized checkpoints are not implemented in the vLLM sharded-state layout", errdefs.ErrNotImplemented)
	}
	c := &LlamaConfig{Tied: f.Tied != nil && *f.Tied}
	for _, v := range []struct {
		key string
		p   *int64
		dst *int64
	}{{"hidden_size", f.Hidden, &c.Hidden}, {"num_attention_heads", f.Heads, &c.Heads},
		{"intermediate_size", f.Intermediate, &c.Intermediate}, {"num_hidden_layers", f.Layers, &c.Layers},
		{"vocab_size", f.Vocab, &c.Vocab}} {
		if v.p == nil || *v.p < 1 || *v.p > maxDim {
			return nil, invalid("", "config.json: %s missing or out of [1, %d]", v.key, maxDim)
		}
		*v.dst = *v.p
	}
	c.KVHeads = c.Heads
	if f.KVHeads != nil {
		if *f.KVHeads < 1 || *f.KVHeads > c.Heads || c.Heads%*f.KVHeads != 0 {
			return nil, invalid("", "config.json: num_key_value_heads %d must divide num_attention_heads %d", *f.KVHeads, c.Heads)
		}
		c.KVHeads = *f.KVHeads
	}
	c.HeadDim = c.Hidden / c.Heads // LlamaAttention: head_dim or hidden_size // num_heads
	if f.HeadDim != nil {
		c.HeadDim = *f.HeadDim
	}
	if c.HeadDim < 1 || c.HeadDim > maxDim {
		return nil, invalid("", "config.json: head_dim %d out of [1, %d]", c.HeadDim, maxDim)
	}
	return c, nil
}

// Check refuses a TP size vLLM itself refuses for this model (its
// divide() and asserts).
func (c *LlamaConfig) Check(tpSize int) error {
	t := int64(tpSize)
	switch {
	case tpSize < 1:
		return invalid("", "tp size %d, want >= 1", tpSize)
	case c.Heads%t != 0:
		return invalid("", "num_attention_heads %d is not divisible by tp size %d", c.Heads, tpSize)
	case c.KVHeads >= t && c.KVHeads%t != 0, c.KVHeads < t && t%c.KVHeads != 0:
		return invalid("", "num_key_value_heads %d and tp size %d: one must divide the other", c.KVHeads, tpSize)
	case c.Intermediate%t != 0:
		return invalid("", "intermediate_size %d is not divisible by tp size %d", c.Intermediate, tpSize)
	case padVocab(c.Vocab)%t != 0:
		return invalid("", "vocab_size %d padded to %d is not divisible by tp size %d", c.Vocab, padVocab(c.Vocab), tpSize)
	}
	return nil
}

func padVocab(v int64) int64 {
	return (v + VLLMVocabPadding - 1) / VLLMVocabPadding * VLLMVocabPadding
}

// Piece is a run of an output tensor: indices [Start, Start+Len) of
// dimension Dim of a source tensor followed by Pad zero indices, or Const.
type Piece struct {
	Tensor     string // source tensor; "" for a Const piece
	Dim        int    // -1: the whole tensor
	Start, Len int64
	Pad        int64
	Const      []byte // the bytes of a tensor no source holds
}

// VLLMTensor is one tensor of a rank's state dict: its pieces' bytes in
// order (each a block of rows: they concatenate along dimension 0).
type VLLMTensor struct {
	Name   string
	DType  string // a Const tensor's dtype; "" for the dtype of its sources
	Shape  []int64
	Pieces []Piece
}

// f32One is 1.0 as a little-endian F32.
var f32One = []byte{0x00, 0x00, 0x80, 0x3f}

// vllmScales are the attention layer's persistent buffers, in register order.
var vllmScales = []string{"_k_scale", "_v_scale", "_q_scale", "_prob_scale"}

// VLLMLlama plans rank's state dict from the checkpoint's tensors (by name):
// every tensor vLLM's LlamaForCausalLM loads must be there with the shape
// config.json implies, and every other tensor must be one vLLM skips.
func VLLMLlama(c *LlamaConfig, src map[string]artifact.TensorInfo, tpSize, rank int) ([]VLLMTensor, error) {
	if err := c.Check(tpSize); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= tpSize {
		return nil, invalid("", "rank %d out of range for tp size %d", rank, tpSize)
	}
	t, r := int64(tpSize), int64(rank)
	used := map[string]bool{}
	var err error
	need := func(name string, shape ...int64) {
		ti, ok := src[name]
		switch {
		case err != nil:
		case !ok:
			err = invalid(name, "missing: %s needs it", VLLMArchitecture)
		case !equalShape(ti.Shape, shape):
			err = invalid(name, "shape %v, config.json implies %v", ti.Shape, shape)
		}
		used[name] = true
	}
	var out []VLLMTensor
	add := func(name string, shape []int64, pieces ...Piece) {
		out = append(out, VLLMTensor{Name: name, Shape: shape, Pieces: pieces})
	}
	rows := func(name string, start, n, pad int64) Piece {
		return Piece{Tensor: name, Dim: 0, Start: start, Len: n, Pad: pad}
	}
	whole := func(name string) Piece { return Piece{Tensor: name, Dim: -1} }

	per := padVocab(c.Vocab) / t
	vocab := func(name string) Piece {
		start, end := min(r*per, c.Vocab), min((r+1)*per, c.Vocab)
		return rows(name, start, end-start, per-(end-start))
	}
	h, hd := c.Hidden, c.HeadDim
	need("model.embed_tokens.weight", c.Vocab, h)
	if c.Tied {
		add("lm_head.weight", []int64{per, h}, vocab("model.embed_tokens.weight"))
	} else {
		add("model.embed_tokens.weight", []int64{per, h}, vocab("model.embed_tokens.weight"))
	}
	nh := c.Heads / t
	nkv, kvShard := c.KVHeads/t, r
	if c.KVHeads <= t {
		nkv, kvShard = 1, r/(t/c.KVHeads)
	}
	ip := c.Intermediate / t
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		q, k, v, o := p+"self_attn.q_proj.weight", p+"self_attn.k_proj.weight", p+"self_attn.v_proj.weight", p+"self_attn.o_proj.weight"
		need(q, c.Heads*hd, h)
		need(k, c.KVHeads*hd, h)
		need(v, c.KVHeads*hd, h)
		need(o, h, c.Heads*hd)
		add(p+"self_attn.qkv_proj.weight", []int64{(nh + 2*nkv) * hd, h},
			rows(q, r*nh*hd, nh*hd, 0), rows(k, kvShard*nkv*hd, nkv*hd, 0), rows(v, kvShard*nkv*hd, nkv*hd, 0))
		add(p+"self_attn.o_proj.weight", []int64{h, nh * hd}, Piece{Tensor: o, Dim: 1, Start: r * nh * hd, Len: nh * hd})
		for _, s := range vllmScales {
			out = append(out, VLLMTensor{Name: p + "self_attn.attn." + s, DType: "F32", Shape: []int64{}, Pieces: []Piece{{Dim: -1, Const: f32One}}})
		}
		g, u, d := p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight"
		need(g, c.Intermediate, h)
		need(u, c.Intermediate, h)
		need(d, h, c.Intermediate)
		add(p+"mlp.gate_up_proj.weight", []int64{2 * ip, h}, rows(g, r*ip, ip, 0), rows(u, r*ip, ip, 0))
		add(p+"mlp.down_proj.weight", []int64{h, ip}, Piece{Tensor: d, Dim: 1, Start: r * ip, Len: ip})
		for _, n := range []string{"input_layernorm.weight", "post_attention_layernorm.weight"} {
			need(p+n, h)
			add(p+n, []int64{h}, whole(p+n))
		}
	}
	need("model.norm.weight", h)
	add("model.norm.weight", []int64{h}, whole("model.norm.weight"))
	if !c.Tied {
		need("lm_head.weight", c.Vocab, h)
		add("lm_head.weight", []int64{per, h}, vocab("lm_head.weight"))
	}
	if err != nil {
		return nil, err
	}
	for name := range src {
		if !used[name] && !vllmSkips(name, c.Tied) {
			return nil, invalid(name, "not a tensor of %s (vLLM would have no parameter to load it into)", VLLMArchitecture)
		}
	}
	for _, vt := range out {
		if err := checkPieces(vt, src); err != nil {
			return nil, err
		}
		if numel(vt.Shape) == 0 {
			return nil, invalid(vt.Name, "no elements: _filter_subtensors would drop it and the loader would miss it")
		}
	}
	return out, nil
}

// vllmSkips reports the checkpoint tensors vLLM's Llama load_weights skips.
func vllmSkips(name string, tied bool) bool {
	return strings.Contains(name, "rotary_emb.inv_freq") || strings.Contains(name, "rotary_emb.cos_cached") ||
		strings.Contains(name, "rotary_emb.sin_cached") || (tied && strings.HasPrefix(name, "lm_head."))
}

// checkPieces: the pieces of a fused tensor share one dtype (a byte
// concatenation of different dtypes is no tensor).
func checkPieces(vt VLLMTensor, src map[string]artifact.TensorInfo) error {
	dtype := ""
	for _, p := range vt.Pieces {
		if p.Tensor == "" {
			continue
		}
		dt := src[p.Tensor].DType
		if d, ok := artifact.LookupDType(dt); !ok || d.Bits%8 != 0 {
			return failure(p.Tensor, "dtype "+dt+" cannot be sharded (only byte-sized dtypes)", errdefs.ErrNotImplemented)
		}
		if dtype != "" && dt != dtype {
			return invalid(vt.Name, "fuses %s and %s tensors", dtype, dt)
		}
		dtype = dt
	}
	return nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// VLLMParts groups tensors of the given byte sizes into part files as
// save_model does: in order, a part is written out before a tensor that
// would take it past maxSize, so a tensor larger than maxSize has a part of
// its own, and when the first tensor is, part 0 is empty (save_model writes
// the empty dict). maxSize must be positive.
func VLLMParts(sizes []int64, maxSize int64) [][]int {
	if len(sizes) == 0 {
		return nil // save_model writes no file
	}
	parts := [][]int{{}}
	var total int64
	for i, n := range sizes {
		if total+n > maxSize {
			parts = append(parts, []int{})
			total = 0
		}
		last := len(parts) - 1
		parts[last] = append(parts[last], i)
		total += n
	}
	return parts
}
