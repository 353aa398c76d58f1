package trust

import (
	"fmt"
	"sort"
	"strings"

	"github.com/distribution/reference"
)

// Warning is a requirement of a valid policy that the signature kinds
// weightsnap reads meet less often than the policy suggests: never, or
// never by a cosign v3 bundle or a model.sig.
type Warning struct {
	Scope string `json:"scope"`
	Line  int    `json:"line"`
	Msg   string `json:"message"`
}

func (w Warning) String() string {
	return fmt.Sprintf("scope %q (line %d): %s", w.Scope, w.Line, w.Msg)
}

// Warnings are the policy's requirements that can never be met by the
// signatures weightsnap reads, or never by a bundle, scope by scope (the
// default first, then the docker scopes in order).
func (p *Policy) Warnings() []Warning {
	var out []Warning
	add := func(scope string, reqs []Requirement, tagScope bool) {
		for _, r := range reqs {
			if r.Type != TypeSigstoreSigned {
				continue
			}
			if msg := requirementWarning(r, tagScope); msg != "" {
				out = append(out, Warning{Scope: scope, Line: r.Line, Msg: msg})
			}
		}
	}
	add("default", p.Default, false)
	scopes := make([]string, 0, len(p.Docker))
	for s := range p.Docker {
		scopes = append(scopes, s)
	}
	sort.Strings(scopes)
	for _, s := range scopes {
		add(s, p.Docker[s], isTagScope(s))
	}
	return out
}

// requirementWarning says why a sigstoreSigned requirement is met less
// often than it reads ("" for no reason): cosign's legacy signatures are
// checked with keys only, without a transparency log, and a bundle or
// model.sig names no image (SignedIdentity.BundleMeets); a tag scope
// applies to pulls by tag only.
func requirementWarning(r Requirement, tagScope bool) string {
	byDigest := r.Identity.Type == IdentityMatchRepoDigestOrExact || r.Identity.Type == IdentityMatchExact
	legacy := r.Fulcio == nil && len(r.RekorKeys) == 0
	switch {
	case !legacy && !byDigest:
		return fmt.Sprintf("never met: signedIdentity %s needs a signature naming an image, which only cosign's legacy signatures do, and weightsnap checks those with keys only, without fulcio or a transparency log", r.Identity.Type)
	case !legacy && tagScope:
		return fmt.Sprintf("never met: this scope applies to pulls by tag, which signedIdentity %s lets only a signature naming the tag accept; a bundle names only the manifest digest, and weightsnap checks cosign's legacy signatures with keys only, without fulcio or a transparency log", r.Identity.Type)
	case !byDigest:
		return fmt.Sprintf("met only by cosign's legacy signatures (the sha256-<hex>.sig tag) naming the image, never by a cosign v3 bundle or a model.sig: signedIdentity %s needs a signature naming an image", r.Identity.Type)
	case tagScope:
		return "met only by cosign's legacy signatures naming the tag (cosign sign --sign-container-identity), never by a cosign v3 bundle: this scope applies to pulls by tag, and a bundle names only the manifest digest"
	}
	return ""
}

// isTagScope says whether a docker scope names a tag (host/repo:tag).
func isTagScope(scope string) bool {
	if !strings.Contains(scope, "/") || strings.HasPrefix(scope, "*.") {
		return false
	}
	named, err := reference.ParseNamed(scope)
	if err != nil {
		return false
	}
	_, ok := named.(reference.Tagged)
	return ok
}
