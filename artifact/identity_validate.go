package artifact

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// identityError is a field of an identity that is missing or wrong; field
// is empty for a document that does not decode.
func identityError(field, format string, args ...any) error {
	if field == "" {
		return fmt.Errorf("invalid identity: %s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("invalid identity: %s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

var (
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
	digestRE = regexp.MustCompile(`^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|blake3:[0-9a-f]{64})$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)
)

// IsImmutableRevision reports whether rev is a 40-hex commit or a digest, never a branch or tag.
func IsImmutableRevision(rev string) bool {
	return commitRE.MatchString(rev) || digestRE.MatchString(rev)
}

// Validate checks every field of the identity and returns an
// errdefs.ErrInvalidArgument naming the first bad one.
func (id Identity) Validate() error {
	bad := identityError
	if id.Schema != IdentitySchema {
		return bad("schema", "unsupported schema %d (want %d)", id.Schema, IdentitySchema)
	}
	if !IsImmutableRevision(id.Model.Revision) {
		return bad("model.revision", "%q is not immutable: want a 40-hex commit or a digest, never a branch name", id.Model.Revision)
	}
	if len(id.Model.Source) == 0 {
		return bad("model.source", "no source files")
	}
	for i, f := range id.Model.Source {
		field := fmt.Sprintf("model.source[%d]", i)
		if err := ValidateRelPath(f.Path); err != nil {
			return bad(field+".path", "%v", err)
		}
		if i > 0 && id.Model.Source[i-1].Path >= f.Path {
			return bad(field+".path", "%q is not sorted after %q or repeats it", f.Path, id.Model.Source[i-1].Path)
		}
		if f.Size < 0 {
			return bad(field+".size", "negative size %d", f.Size)
		}
		if !IsSHA256Hex(f.SHA256) {
			return bad(field+".sha256", "want 64 lower-case hex digits, got %q", f.SHA256)
		}
	}
	if !nameRE.MatchString(id.Component) {
		return bad("component", "want a name such as all or language_model, got %q", id.Component)
	}
	if id.Representation.DType != "source" {
		if _, ok := LookupDType(id.Representation.DType); !ok {
			return bad("representation.dtype", "unknown dtype %q", id.Representation.DType)
		}
	}
	if len(id.Representation.QuantParams) > 0 && id.Representation.Quantization == "" {
		return bad("representation.quant_params", "parameters without a quantization scheme")
	}
	if err := id.Layout.validate(); err != nil {
		return err
	}
	if id.Adaptation != nil && !IsSHA256Hex(strings.TrimPrefix(id.Adaptation.LoRAFingerprint, "sha256:")) {
		return bad("adaptation.lora_fingerprint", "want a sha256 digest, got %q", id.Adaptation.LoRAFingerprint)
	}
	if err := id.validateCache(); err != nil {
		return err
	}
	p := id.Producer
	switch {
	case !nameRE.MatchString(p.Name):
		return bad("producer.name", "invalid name %q", p.Name)
	case p.Version == "":
		return bad("producer.version", "empty")
	case p.Fingerprint == "":
		return bad("producer.fingerprint", "empty")
	case p.ManifestSchema <= 0:
		return bad("producer.manifest_schema", "must be positive, got %d", p.ManifestSchema)
	case p.RestorerSchema <= 0:
		return bad("producer.restorer_schema", "must be positive, got %d", p.RestorerSchema)
	}
	return nil
}

// validateCache checks that a compile cache's identity, and only it, has
// a cache key, and the key.
func (id Identity) validateCache() error {
	switch {
	case id.Cache == nil && id.Component == CompileCacheComponent:
		return identityError("cache", "a %s identity needs its cache key", CompileCacheComponent)
	case id.Cache == nil:
		return nil
	case id.Component != CompileCacheComponent:
		return identityError("cache", "only a %s identity has a cache key, not component %q", CompileCacheComponent, id.Component)
	}
	return id.Cache.validate()
}

func (l Layout) validate() error {
	bad := func(field, format string, args ...any) error {
		return identityError("layout."+field, format, args...)
	}
	if !nameRE.MatchString(l.Name) {
		return bad("name", "invalid layout name %q", l.Name)
	}
	switch {
	case l.TPSize < 0:
		return bad("tp_size", "negative")
	case l.TPSize == 0 && l.TPRank != 0:
		return bad("tp_rank", "set without tp_size")
	case l.TPSize > 0 && (l.TPRank < 0 || l.TPRank >= l.TPSize):
		return bad("tp_rank", "rank %d is not below tp_size %d", l.TPRank, l.TPSize)
	case l.SPSize < 0:
		return bad("sp_size", "negative")
	case l.SPSize == 0 && l.SPBackend != "":
		return bad("sp_backend", "set without sp_size")
	case l.PPStage != nil && *l.PPStage < 0:
		return bad("pp_stage", "negative")
	case l.EPRank != nil && *l.EPRank < 0:
		return bad("ep_rank", "negative")
	case l.DPRank != nil && l.Replicated:
		return bad("dp_rank", "replicated weights never carry a data-parallel rank")
	case l.DPRank != nil && *l.DPRank < 0:
		return bad("dp_rank", "negative")
	}
	return nil
}

// ValidateRelPath accepts a clean, relative, slash-separated path that stays
// inside its root: no "..", no absolute paths, no empty or dot elements.
func ValidateRelPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case strings.ContainsRune(p, 0) || strings.Contains(p, "\\"):
		return fmt.Errorf("path %q has a NUL or backslash", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("path %q leaves its root", p)
	}
	return nil
}
