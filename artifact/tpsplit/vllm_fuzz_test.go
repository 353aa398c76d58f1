package tpsplit

import (
	"fmt"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

// FuzzParseLlamaConfig: a config.json never panics the parser; one it
// accepts and a TP size it passes plan a checkpoint of exactly the shapes it
// implies, with every piece inside its source tensor and every tensor's
// pieces adding up to its shape.
func FuzzParseLlamaConfig(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":256,"num_hidden_layers":2,"vocab_size":500}`), uint8(2))
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"num_attention_heads":1,"head_dim":3,"intermediate_size":4,"num_hidden_layers":1,"vocab_size":1,"tie_word_embeddings":true}`), uint8(1))
	f.Add([]byte(`{"architectures":["MistralForCausalLM"]}`), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, tp uint8) {
		c, err := ParseLlamaConfig(data)
		if err != nil || c.Layers > 4 || c.Check(int(tp)) != nil {
			return
		}
		src := map[string]artifact.TensorInfo{}
		add := func(name string, shape ...int64) {
			src[name] = artifact.TensorInfo{Name: name, DType: "BF16", Shape: shape}
		}
		add("model.embed_tokens.weight", c.Vocab, c.Hidden)
		if !c.Tied {
			add("lm_head.weight", c.Vocab, c.Hidden)
		}
		add("model.norm.weight", c.Hidden)
		for i := range c.Layers {
			p := fmt.Sprintf("model.layers.%d.", i)
			add(p+"self_attn.q_proj.weight", c.Heads*c.HeadDim, c.Hidden)
			add(p+"self_attn.k_proj.weight", c.KVHeads*c.HeadDim, c.Hidden)
			add(p+"self_attn.v_proj.weight", c.KVHeads*c.HeadDim, c.Hidden)
			add(p+"self_attn.o_proj.weight", c.Hidden, c.Heads*c.HeadDim)
			add(p+"mlp.gate_proj.weight", c.Intermediate, c.Hidden)
			add(p+"mlp.up_proj.weight", c.Intermediate, c.Hidden)
			add(p+"mlp.down_proj.weight", c.Hidden, c.Intermediate)
			add(p+"input_layernorm.weight", c.Hidden)
			add(p+"post_attention_layernorm.weight", c.Hidden)
		}
		for rank := range int(tp) {
			plan, err := VLLMLlama(c, src, int(tp), rank)
			if err != nil {
				t.Fatalf("rank %d of %d: %v", rank, tp, err)
			}
			for _, vt := range plan {
				var elems int64
				for _, p := range vt.Pieces {
					if p.Tensor == "" {
						elems += int64(len(p.Const)) / 4
						continue
					}
					s := src[p.Tensor].Shape
					if p.Dim < 0 {
						elems += numel(s)
						continue
					}
					if p.Start < 0 || p.Len < 0 || p.Pad < 0 || p.Start+p.Len > s[p.Dim] {
						t.Fatalf("%s: piece %+v outside %v", vt.Name, p, s)
					}
					elems += numel(s) / s[p.Dim] * (p.Len + p.Pad)
				}
				if elems != numel(vt.Shape) {
					t.Fatalf("%s: pieces hold %d elements, shape %v", vt.Name, elems, vt.Shape)
				}
			}
		}
	})
}
