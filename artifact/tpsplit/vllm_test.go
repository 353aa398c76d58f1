package tpsplit_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
)

// TestVLLMParts follows save_model (vllm/model_executor/model_loader/
// sharded_state_loader.py @ 01ed47b4): in order, a part is written out when
// the next tensor would take it past max_size, including an empty part 0
// when the first tensor alone is larger.
func TestVLLMParts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int64
		max   int64
		want  [][]int
	}{
		{"none", nil, 10, nil},
		{"one part", []int64{3, 3, 4}, 10, [][]int{{0, 1, 2}}},
		{"exactly max stays", []int64{5, 5, 1}, 10, [][]int{{0, 1}, {2}}},
		{"oversized middle alone", []int64{2, 20, 2}, 10, [][]int{{0}, {1}, {2}}},
		{"oversized first leaves part 0 empty", []int64{20, 2}, 10, [][]int{{}, {0}, {1}}},
		{"zero-size tensors ride along", []int64{10, 0, 1}, 10, [][]int{{0, 1}, {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tpsplit.VLLMParts(tc.sizes, tc.max)
			if !slices.EqualFunc(got, tc.want, func(a, b []int) bool { return slices.Equal(a, b) }) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := tpsplit.VLLMFileName(3, 12); got != "model-rank-3-part-12.safetensors" {
		t.Fatalf("file name %q", got)
	}
}

func TestParseLlamaConfig(t *testing.T) {
	const sizes = `"hidden_size":64,"num_attention_heads":4,"intermediate_size":256,"num_hidden_layers":2,"vocab_size":500`
	for _, tc := range []struct {
		name  string
		doc   string
		tp    int
		class func(error) bool // nil: accepted
		want  tpsplit.LlamaConfig
	}{
		{"defaults", `{"architectures":["LlamaForCausalLM"],` + sizes + `}`, 2, nil,
			tpsplit.LlamaConfig{Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16, Intermediate: 256, Layers: 2, Vocab: 500}},
		{"gqa, head_dim, tied", `{"architectures":["LlamaForCausalLM"],"num_key_value_heads":2,"head_dim":32,"tie_word_embeddings":true,` + sizes + `}`, 4, nil,
			tpsplit.LlamaConfig{Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 32, Intermediate: 256, Layers: 2, Vocab: 500, Tied: true}},
		{"null quantization", `{"architectures":["LlamaForCausalLM"],"quantization_config":null,` + sizes + `}`, 1, nil,
			tpsplit.LlamaConfig{Hidden: 64, Heads: 4, KVHeads: 4, HeadDim: 16, Intermediate: 256, Layers: 2, Vocab: 500}},
		{"other architecture", `{"architectures":["Qwen2ForCausalLM"],` + sizes + `}`, 1, errdefs.IsNotImplemented, tpsplit.LlamaConfig{}},
		{"two architectures", `{"architectures":["LlamaForCausalLM","X"],` + sizes + `}`, 1, errdefs.IsNotImplemented, tpsplit.LlamaConfig{}},
		{"no architecture", `{` + sizes + `}`, 1, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"mlp bias", `{"architectures":["LlamaForCausalLM"],"mlp_bias":true,` + sizes + `}`, 1, errdefs.IsNotImplemented, tpsplit.LlamaConfig{}},
		{"missing size", `{"architectures":["LlamaForCausalLM"],"hidden_size":64}`, 1, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"huge size", `{"architectures":["LlamaForCausalLM"],` + sizes + `,"vocab_size":9007199254740993}`, 1, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"kv heads not dividing", `{"architectures":["LlamaForCausalLM"],"num_key_value_heads":3,` + sizes + `}`, 1, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"not json", `{`, 1, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"heads vs tp", `{"architectures":["LlamaForCausalLM"],` + sizes + `}`, 8, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
		{"padded vocab vs tp", `{"architectures":["LlamaForCausalLM"],"num_attention_heads":3,"hidden_size":48,"intermediate_size":96,"num_hidden_layers":1,"vocab_size":64}`, 3, errdefs.IsInvalidArgument, tpsplit.LlamaConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tpsplit.ParseLlamaConfig([]byte(tc.doc))
			if err == nil {
				err = c.Check(tc.tp)
			}
			if tc.class != nil {
				if err == nil || !tc.class(err) {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err != nil || *c != tc.want {
				t.Fatalf("got %+v, %v; want %+v", c, err, tc.want)
			}
		})
	}
	_, err := tpsplit.ParseLlamaConfig([]byte(`{"architectures":["Qwen2ForCausalLM"]}`))
	var ae *tpsplit.ArchitectureError
	if !errors.As(err, &ae) || ae.Architecture != "Qwen2ForCausalLM" {
		t.Fatalf("got %v, want an ArchitectureError naming Qwen2ForCausalLM", err)
	}
}
