// Package synth writes deterministic synthetic checkpoints laid out like a
// Hugging Face model directory: config.json, model.safetensors.index.json and
// safetensors shards. The same options always give the same bytes.
package synth

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// Options says what to synthesise.
type Options struct {
	Size   int64  // approximate total payload bytes of the shards
	Shards int    // number of safetensors shards
	DType  string // a byte-sized safetensors dtype, e.g. BF16
	Seed   uint64
	// Heads, KVHeads and Vocab override the attention heads (default
	// hidden/64, at least 1), the key/value heads (default: Heads; config.json
	// gains num_key_value_heads when set) and the vocabulary (default 8 *
	// hidden); Tied drops lm_head.weight and sets tie_word_embeddings. The
	// defaults write the same bytes as before these options.
	Heads, KVHeads, Vocab int
	Tied                  bool
	// Progress, if set, is told of every chunk of bytes written.
	Progress func(n int64)
}

// Model is the plan of a synthetic model.
type Model struct {
	Hidden, Intermediate, Vocab, Layers int
	Heads, KVHeads                      int
	Shards                              [][]artifact.TensorSpec
}

// Plan lays out a llama-shaped model of about opts.Size bytes over opts.Shards shards.
func Plan(opts Options) (*Model, error) {
	dt, ok := artifact.LookupDType(opts.DType)
	if !ok || dt.Bits%8 != 0 {
		return nil, fmt.Errorf("synth: dtype %q is not a byte-sized safetensors dtype: %w", opts.DType, errdefs.ErrInvalidArgument)
	}
	if opts.Size <= 0 || opts.Shards <= 0 {
		return nil, fmt.Errorf("synth: size and shards must be positive: %w", errdefs.ErrInvalidArgument)
	}
	el := int64(dt.Bits / 8)
	h := int64(64)
	for _, c := range []int64{256, 1024, 4096} {
		if opts.Size >= c*c*el*64 {
			h = c
		}
	}
	m := &Model{Hidden: int(h), Intermediate: int(h * 4), Vocab: int(h * 8), Heads: max(int(h)/64, 1)}
	if opts.Heads > 0 {
		m.Heads = opts.Heads
	}
	m.KVHeads = m.Heads
	if opts.KVHeads > 0 {
		m.KVHeads = opts.KVHeads
	}
	if opts.Vocab > 0 {
		m.Vocab = opts.Vocab
	}
	if opts.Heads < 0 || opts.KVHeads < 0 || opts.Vocab < 0 || int(h)%m.Heads != 0 || m.Heads%m.KVHeads != 0 {
		return nil, fmt.Errorf("synth: %d heads and %d key/value heads for hidden size %d: want heads dividing it and key/value heads dividing heads: %w",
			m.Heads, m.KVHeads, h, errdefs.ErrInvalidArgument)
	}
	kv := h / int64(m.Heads) * int64(m.KVHeads)
	var specs []artifact.TensorSpec
	add := func(name string, shape ...int64) int64 {
		specs = append(specs, artifact.TensorSpec{Name: name, DType: opts.DType, Shape: shape})
		n := el
		for _, s := range shape {
			n *= s
		}
		return n
	}
	total := add("model.embed_tokens.weight", int64(m.Vocab), h)
	if !opts.Tied {
		total += add("lm_head.weight", int64(m.Vocab), h)
	}
	total += add("model.norm.weight", h)
	inter := int64(m.Intermediate)
	for total < opts.Size {
		p := fmt.Sprintf("model.layers.%d.", m.Layers)
		total += add(p+"self_attn.q_proj.weight", h, h)
		total += add(p+"self_attn.k_proj.weight", kv, h)
		total += add(p+"self_attn.v_proj.weight", kv, h)
		total += add(p+"self_attn.o_proj.weight", h, h)
		total += add(p+"mlp.gate_proj.weight", inter, h)
		total += add(p+"mlp.up_proj.weight", inter, h)
		total += add(p+"mlp.down_proj.weight", h, inter)
		total += add(p+"input_layernorm.weight", h)
		total += add(p+"post_attention_layernorm.weight", h)
		m.Layers++
	}
	// Contiguous groups of about total/shards bytes each.
	m.Shards = make([][]artifact.TensorSpec, opts.Shards)
	var acc int64
	for _, s := range specs {
		i := min(int(acc*int64(opts.Shards)/total), opts.Shards-1)
		m.Shards[i] = append(m.Shards[i], s)
		b, _ := dt.TensorBytes(s.Shape)
		acc += b
	}
	return m, nil
}

// Write synthesises the checkpoint into dir (created if missing).
func Write(ctx context.Context, dir string, opts Options) error {
	m, err := Plan(opts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	weightMap := map[string]string{}
	var totalSize int64
	rng := opts.Seed*0x9E3779B97F4A7C15 + 1
	for i, specs := range m.Shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(m.Shards))
		if len(m.Shards) == 1 {
			name = "model.safetensors"
		}
		n, err := writeShard(ctx, filepath.Join(dir, name), specs, &rng, opts.Progress)
		if err != nil {
			return err
		}
		totalSize += n
		for _, s := range specs {
			weightMap[s.Name] = name
		}
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": m.Hidden, "intermediate_size": m.Intermediate, "num_hidden_layers": m.Layers,
		"num_attention_heads": m.Heads, "vocab_size": m.Vocab, "torch_dtype": opts.DType,
	}
	if opts.KVHeads > 0 {
		cfg["num_key_value_heads"] = m.KVHeads
	}
	if opts.Tied {
		cfg["tie_word_embeddings"] = true
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "model.safetensors.index.json"), map[string]any{
		"metadata": map[string]any{"total_size": totalSize}, "weight_map": weightMap,
	})
}

func writeShard(ctx context.Context, path string, specs []artifact.TensorSpec, rng *uint64, progress func(int64)) (int64, error) {
	header, _, total, err := artifact.PlanSafetensors(specs, map[string]string{"format": "pt"})
	if err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 4<<20)
	if _, err := w.Write(header); err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for left := total - int64(len(header)); left > 0; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n := min(int64(len(buf)), left)
		fill(buf[:n], rng)
		if _, err := w.Write(buf[:n]); err != nil {
			return 0, err
		}
		left -= n
		if progress != nil {
			progress(n)
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return total, f.Close()
}

// fill writes xorshift64* output; deterministic for a given state.
func fill(b []byte, s *uint64) {
	x := *s
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		binary.LittleEndian.PutUint64(b[i:], x*0x2545F4914F6CDD1D)
	}
	for ; i < len(b); i++ {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		b[i] = byte(x * 0x2545F4914F6CDD1D)
	}
	*s = x
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}
