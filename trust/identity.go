package trust

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
)

// Signed identity types (containers-policy.json's signedIdentity "type").
const (
	IdentityMatchExact             = "matchExact"
	IdentityMatchRepoDigestOrExact = "matchRepoDigestOrExact"
	IdentityMatchRepository        = "matchRepository"
	IdentityExactReference         = "exactReference"
	IdentityExactRepository        = "exactRepository"
	IdentityRemapIdentity          = "remapIdentity"
)

// Matches says whether a signature whose payload names signed (its
// docker-reference) meets the rule for an image used by intended, the
// reference it is pulled or run by: containers/image's
// matchesDockerReference, rule for rule.
func (id SignedIdentity) Matches(intended reference.Named, signed string) bool {
	sig, err := reference.ParseNormalizedNamed(signed)
	if err != nil {
		return false
	}
	switch id.Type {
	case IdentityMatchExact:
		if reference.IsNameOnly(intended) || reference.IsNameOnly(sig) {
			return false
		}
		return sig.String() == intended.String()
	case IdentityMatchRepoDigestOrExact:
		return repoDigestOrExact(intended, sig)
	case IdentityMatchRepository:
		return sig.Name() == intended.Name()
	case IdentityExactReference:
		want, err := reference.ParseNormalizedNamed(id.DockerReference)
		if err != nil || reference.IsNameOnly(want) || reference.IsNameOnly(sig) {
			return false
		}
		return sig.String() == want.String()
	case IdentityExactRepository:
		want, err := reference.ParseNormalizedNamed(id.DockerRepository)
		if err != nil {
			return false
		}
		return sig.Name() == want.Name()
	case IdentityRemapIdentity:
		remapped, err := id.remap(intended)
		if err != nil {
			return false
		}
		return repoDigestOrExact(remapped, sig)
	}
	return false
}

// repoDigestOrExact is matchRepoDigestOrExact: a pull by tag needs a
// signature naming that exact reference, a pull by digest one naming
// any tag or digest of the same repository; a signature naming only a
// repository meets neither.
func repoDigestOrExact(intended, sig reference.Named) bool {
	if reference.IsNameOnly(sig) {
		return false
	}
	switch intended.(type) {
	case reference.NamedTagged: // also a reference with a tag and a digest
		return sig.String() == intended.String()
	case reference.Canonical:
		return sig.Name() == intended.Name()
	}
	return false
}

// remap rewrites ref's Prefix to SignedPrefix where ref's repository is
// Prefix or below it (a path boundary), as remapIdentity does.
func (id SignedIdentity) remap(ref reference.Named) (reference.Named, error) {
	name := ref.Name()
	under := name == id.Prefix || (strings.HasPrefix(name, id.Prefix) && len(name) > len(id.Prefix) && name[len(id.Prefix)] == '/')
	if !under {
		return ref, nil
	}
	s := strings.Replace(ref.String(), id.Prefix, id.SignedPrefix, 1)
	out, err := reference.ParseNamed(s)
	if err != nil {
		return nil, fmt.Errorf("remap %s to %s: %w", ref, s, err)
	}
	return out, nil
}

// validate checks the rule's members as containers/image does: an
// exactReference names a tag or digest, an exactRepository a
// repository, and each remapIdentity prefix is a host[:port] or a
// repository namespace under one.
func (id SignedIdentity) validate() error {
	switch id.Type {
	case IdentityExactReference:
		ref, err := reference.ParseNormalizedNamed(id.DockerReference)
		if err != nil {
			return fmt.Errorf("dockerReference %q: %v", id.DockerReference, err)
		}
		if reference.IsNameOnly(ref) {
			return fmt.Errorf("dockerReference %q names neither a tag nor a digest", id.DockerReference)
		}
	case IdentityExactRepository:
		if _, err := reference.ParseNormalizedNamed(id.DockerRepository); err != nil {
			return fmt.Errorf("dockerRepository %q: %v", id.DockerRepository, err)
		}
	case IdentityRemapIdentity:
		for _, p := range []string{id.Prefix, id.SignedPrefix} {
			if !remapDomainRE.MatchString(p) && !(remapNameRE.MatchString(p) && remapDomainPrefixRE.MatchString(p)) {
				return fmt.Errorf("prefix %q is not a host[:port] or a repository namespace under one", p)
			}
		}
	}
	return nil
}

// What a remapIdentity prefix may be.
var (
	remapDomainRE       = regexp.MustCompile("^" + reference.DomainRegexp.String() + "$")
	remapDomainPrefixRE = regexp.MustCompile("^" + reference.DomainRegexp.String() + "/")
	remapNameRE         = regexp.MustCompile("^" + reference.NameRegexp.String() + "$")
)

// BundleMeets says whether a cosign v3 bundle, which names the manifest
// digest and no image reference, can meet the rule for an image used by
// intended; when it cannot, why says so. A bundle meets
// matchRepoDigestOrExact and matchExact for a pull by digest only: the
// digest the user named is the one the signer signed. A pull by tag
// trusts the registry's tag, which those rules let only a signature
// naming the tag vouch for; the other rules need a signature naming a
// repository or reference.
func (id SignedIdentity) BundleMeets(intended reference.Named) (ok bool, why string) {
	switch id.Type {
	case IdentityMatchRepoDigestOrExact, IdentityMatchExact:
		_, tagged := intended.(reference.Tagged)
		if _, digested := intended.(reference.Digested); digested && !tagged {
			return true, ""
		}
		return false, fmt.Sprintf("a cosign v3 bundle names only the manifest digest, and signedIdentity %s lets only a signature naming %s accept a pull by tag: pull by digest, or sign with a signature naming the tag (cosign's legacy format)", id.Type, intended)
	}
	return false, fmt.Sprintf("a cosign v3 bundle names only the manifest digest, and signedIdentity %s needs a signature naming an image (cosign's legacy format)", id.Type)
}
