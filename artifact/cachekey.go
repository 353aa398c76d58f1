package artifact

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// CompileCacheComponent is the component of a compile-cache artifact: a
// directory an engine wrote at its first start (TorchInductor, Triton,
// DeepGEMM, FlashInfer, ...), kept so that a later start finds it warm.
const CompileCacheComponent = "compile-cache"

// CompileCacheLayout is the layout name of a compile-cache artifact: its
// files as the engine wrote them.
const CompileCacheLayout = "compile-cache"

// CacheKey is what makes a compile cache valid, beside the model it was
// compiled for: the engine and its version, the GPU architecture and the
// parallel configuration, and the caller's own keys. A compile-cache
// identity carries it (Identity.Cache); every other identity has none.
type CacheKey struct {
	// For is the identity of the weight artifact the cache was compiled
	// for: its dtype, quantization and layout matter as much as its model.
	For ID `json:"for"`
	// Engine and EngineVersion name the engine, e.g. "vllm" "0.11.0".
	Engine        string `json:"engine"`
	EngineVersion string `json:"engine_version"`
	// GPUArch is the accelerator architecture, e.g. "sm_90" or "gfx942";
	// "none" for a cache compiled for the CPU.
	GPUArch string `json:"gpu_arch"`
	// TPSize and PPSize are the tensor- and pipeline-parallel sizes the
	// engine ran with: a cache covers every rank of that configuration.
	TPSize int `json:"tp_size"`
	PPSize int `json:"pp_size"`
	// Keys are the caller's extra keys (a compile flag, a CUDA version).
	Keys map[string]string `json:"keys,omitempty"`
}

var (
	cacheKeyRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	cacheValueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$`)
)

// maxCacheKeys bounds a cache key's extra keys.
const maxCacheKeys = 32

func (k CacheKey) validate() error {
	bad := func(field, format string, args ...any) error {
		return identityError("cache."+field, format, args...)
	}
	switch {
	case k.For.IsZero():
		return bad("for", "the weight artifact the cache was compiled for is missing")
	case !cacheValueRE.MatchString(k.Engine):
		return bad("engine", "want a name such as vllm, got %q", k.Engine)
	case !cacheValueRE.MatchString(k.EngineVersion):
		return bad("engine_version", "want a version such as 0.11.0, got %q", k.EngineVersion)
	case !cacheValueRE.MatchString(k.GPUArch):
		return bad("gpu_arch", "want an architecture such as sm_90, gfx942 or none, got %q", k.GPUArch)
	case k.TPSize < 1:
		return bad("tp_size", "must be at least 1, got %d", k.TPSize)
	case k.PPSize < 1:
		return bad("pp_size", "must be at least 1, got %d", k.PPSize)
	case len(k.Keys) > maxCacheKeys:
		return bad("keys", "%d keys, at most %d", len(k.Keys), maxCacheKeys)
	}
	for name, v := range k.Keys {
		if err := CheckCacheKey(name, v); err != nil {
			return bad("keys", "%v", err)
		}
	}
	return nil
}

// CheckCacheKey checks one extra key of a cache key: a lower-case name
// (letters, digits, '.', '_', '-'; at most 64) and a printable value of at
// most 256 bytes with no white space but spaces inside it.
func CheckCacheKey(name, value string) error {
	if !cacheKeyRE.MatchString(name) {
		return fmt.Errorf("key %q: want a lower-case name of letters, digits, '.', '_' and '-' (at most 64)", name)
	}
	if value == "" || len(value) > 256 || strings.TrimSpace(value) != value {
		return fmt.Errorf("key %s: the value must be 1 to 256 bytes with no white space around it", name)
	}
	for _, r := range value {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("key %s: the value has the unprintable character %q", name, r)
		}
	}
	return nil
}

// CompileCacheIdentity is the identity of a compile cache made for the
// weight artifact weights (its identity; key.For is its ID): the model
// fields are the weights', so the cache is bound to the same model, and
// the key says the rest. Its files are stored as the engine wrote them.
func CompileCacheIdentity(weights Identity, key CacheKey, producer ProducerRef) (Identity, error) {
	id := Identity{
		Schema:         IdentitySchema,
		Model:          weights.Model,
		Component:      CompileCacheComponent,
		Representation: Representation{DType: "source"},
		Layout:         Layout{Name: CompileCacheLayout},
		Cache:          &key,
		Producer:       producer,
	}
	return id, id.Validate()
}

// SortedCacheKeys are a cache key's extra keys as name=value, sorted.
func (k CacheKey) SortedCacheKeys() []string {
	out := make([]string, 0, len(k.Keys))
	for name, v := range k.Keys {
		out = append(out, name+"="+v)
	}
	sort.Strings(out)
	return out
}
