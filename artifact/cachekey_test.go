package artifact

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func cacheTestWeights() Identity {
	return Identity{
		Schema:         IdentitySchema,
		Model:          Model{Repository: "org/m", Revision: strings.Repeat("a", 40), Source: []SourceFile{{Path: "model.safetensors", Size: 1, SHA256: strings.Repeat("b", 64)}}},
		Component:      "all",
		Representation: Representation{DType: "source"},
		Layout:         Layout{Name: "source"},
		Producer:       PassthroughRef(),
	}
}

func cacheTestKey(t *testing.T) CacheKey {
	t.Helper()
	w, err := cacheTestWeights().ID()
	if err != nil {
		t.Fatal(err)
	}
	return CacheKey{For: w, Engine: "vllm", EngineVersion: "0.11.0", GPUArch: "sm_90", TPSize: 2, PPSize: 1, Keys: map[string]string{"cuda": "12.8"}}
}

func TestCompileCacheIdentity(t *testing.T) {
	weights := cacheTestWeights()
	key := cacheTestKey(t)
	ref := ProducerRef{Name: "compile-cache", Version: "1", Fingerprint: "f", ManifestSchema: 1, RestorerSchema: 1}
	id, err := CompileCacheIdentity(weights, key, ref)
	if err != nil {
		t.Fatal(err)
	}
	if id.Component != CompileCacheComponent || id.Model.Revision != weights.Model.Revision || id.Model.Repository != "org/m" || len(id.Model.Source) != 1 {
		t.Fatalf("the cache's identity is not bound to the weights' model: %+v", id)
	}
	first, _ := id.ID()
	again, _ := CompileCacheIdentity(weights, cacheTestKey(t), ref)
	if second, _ := again.ID(); second != first {
		t.Fatalf("the same keys give two IDs: %s, %s", first, second)
	}
	// Every key changes the ID.
	for name, change := range map[string]func(k *CacheKey){
		"engine":         func(k *CacheKey) { k.Engine = "sglang" },
		"engine version": func(k *CacheKey) { k.EngineVersion = "0.11.1" },
		"gpu arch":       func(k *CacheKey) { k.GPUArch = "sm_100" },
		"tp":             func(k *CacheKey) { k.TPSize = 4 },
		"pp":             func(k *CacheKey) { k.PPSize = 2 },
		"extra key":      func(k *CacheKey) { k.Keys = map[string]string{"cuda": "12.9"} },
		"no extra key":   func(k *CacheKey) { k.Keys = nil },
		"weights":        func(k *CacheKey) { k.For, _ = ParseIDHex(strings.Repeat("c", 64)) },
	} {
		k := cacheTestKey(t)
		change(&k)
		other, err := CompileCacheIdentity(weights, k, ref)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d, _ := other.ID(); d == first {
			t.Errorf("%s: the ID did not change", name)
		}
	}
	// The canonical JSON parses back to the same ID.
	c, err := id.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseIdentity(c)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := back.ID(); d != first {
		t.Fatalf("parsed back to %s, want %s", d, first)
	}
}

// TestIdentityWithoutCacheUnchanged: an identity without a cache key
// encodes no "cache" field, so every ID made before the field existed stays.
func TestIdentityWithoutCacheUnchanged(t *testing.T) {
	c, err := cacheTestWeights().CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(c, []byte(`"cache"`)) {
		t.Fatalf("canonical JSON without a cache key names one: %s", c)
	}
	const want = `{"component":"all","layout":{"name":"source"},"model":{"repository":"org/m","revision":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","source":[{"path":"model.safetensors","sha256":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","size":1}]},"producer":{`
	if !bytes.HasPrefix(c, []byte(want)) {
		t.Fatalf("canonical JSON changed:\n%s\nwant prefix\n%s", c, want)
	}
}

func TestCacheKeyValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(id *Identity)
		field  string // "" for valid
	}{
		{"valid", func(*Identity) {}, ""},
		{"no key on a cache", func(id *Identity) { id.Cache = nil }, "cache"},
		{"key on weights", func(id *Identity) { id.Component = "all" }, "cache"},
		{"no for", func(id *Identity) { id.Cache.For = ID{} }, "cache.for"},
		{"no engine", func(id *Identity) { id.Cache.Engine = "" }, "cache.engine"},
		{"engine with a space", func(id *Identity) { id.Cache.Engine = "v llm" }, "cache.engine"},
		{"no engine version", func(id *Identity) { id.Cache.EngineVersion = "" }, "cache.engine_version"},
		{"no gpu arch", func(id *Identity) { id.Cache.GPUArch = "" }, "cache.gpu_arch"},
		{"tp 0", func(id *Identity) { id.Cache.TPSize = 0 }, "cache.tp_size"},
		{"pp 0", func(id *Identity) { id.Cache.PPSize = 0 }, "cache.pp_size"},
		{"upper-case key", func(id *Identity) { id.Cache.Keys = map[string]string{"CUDA": "12"} }, "cache.keys"},
		{"empty value", func(id *Identity) { id.Cache.Keys = map[string]string{"cuda": ""} }, "cache.keys"},
		{"control character", func(id *Identity) { id.Cache.Keys = map[string]string{"cuda": "1\x002"} }, "cache.keys"},
		{"value with a space inside", func(id *Identity) { id.Cache.Keys = map[string]string{"flags": "-O3 -g"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := cacheTestKey(t)
			id := Identity{Schema: IdentitySchema, Model: cacheTestWeights().Model, Component: CompileCacheComponent,
				Representation: Representation{DType: "source"}, Layout: Layout{Name: CompileCacheLayout}, Cache: &key, Producer: PassthroughRef()}
			tc.change(&id)
			err := id.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("Validate() = %v, want an invalid argument naming %s", err, tc.field)
			}
		})
	}
}
