// Package trust is the node's trust policy: which signatures an artifact
// from a registry must carry before anything of it is published. The
// policy is a file in containers-policy.json's format (the one CRI-O and
// podman read): a default requirement list, and per transport ("docker")
// scopes by registry, repository namespace, repository and tag, the most
// specific one applying. Signatures are verified with sigstore-go; this
// package is the glue: the policy, finding what applies, and checking the
// cosign and OpenSSF model-signing bundles against it.
package trust

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// DefaultPolicyPath is the policy file read when [verify] policy is not set.
const DefaultPolicyPath = "/etc/weightsnap/policy.json"

// Bounds on what a policy may make the parser read.
const (
	MaxPolicyBytes   = 1 << 20  // the policy file
	MaxKeyBytes      = 64 << 10 // one public key file or keyData
	MaxCABytes       = 1 << 20  // one CA bundle (caPath, caData)
	MaxRequirements  = 64       // requirements of one scope
	MaxScopes        = 4096     // scopes of one transport
	MaxKeysPerPolicy = 64       // keyPaths of one requirement
)

// Requirement types (containers-policy.json's "type").
const (
	TypeAcceptAnything = "insecureAcceptAnything"
	TypeReject         = "reject"
	TypeSigstoreSigned = "sigstoreSigned"
)

// Policy is a parsed policy file.
type Policy struct {
	// File is where the policy was read from ("" for AcceptAll).
	File string
	// Default applies where no scope does.
	Default []Requirement
	// Docker holds the docker transport's scopes: "" (the transport's
	// default), host[:port], *.domain, host/namespace, host/repo and
	// host/repo:tag.
	Docker map[string][]Requirement
	// Unverified is true for the policy of an absent file: everything is
	// accepted, and what is accepted is reported as unverified.
	Unverified bool
}

// AcceptAll is the policy of a node without a policy file.
func AcceptAll() *Policy {
	return &Policy{Default: []Requirement{{Type: TypeAcceptAnything}}, Docker: map[string][]Requirement{}, Unverified: true}
}

// Requirement is one element of a scope's list: all of a list's
// requirements must hold.
type Requirement struct {
	Type string
	// Line is where the requirement starts in the policy.
	Line int
	// Keys are PEM public keys (keyPath, keyPaths, keyData, keyDatas): a
	// signature by any one of them satisfies the requirement.
	Keys []Key
	// Fulcio is set for keyless signatures: a certificate from this CA
	// for this identity, with a transparency-log entry in the bundle.
	Fulcio *Fulcio
	// RekorKeys are the transparency log's public keys (PEM).
	RekorKeys [][]byte
	// Identity is the signedIdentity rule.
	Identity SignedIdentity
}

// Key is one trusted public key and where the policy named it.
type Key struct {
	Source string // the path, or "keyData"
	PEM    []byte
}

// Fulcio is the fulcio member of a sigstoreSigned requirement.
type Fulcio struct {
	CAPEM        []byte
	OIDCIssuer   string
	SubjectEmail string
}

// SignedIdentity is containers-policy.json's signedIdentity.
type SignedIdentity struct {
	Type             string // matchExact, matchRepoDigestOrExact, matchRepository, exactReference, exactRepository, remapIdentity
	DockerReference  string
	DockerRepository string
	Prefix           string
	SignedPrefix     string
}

// LoadPolicy reads the policy at path. A missing file at
// DefaultPolicyPath, or an empty path, is AcceptAll; any other missing
// file is an error.
func LoadPolicy(path string) (*Policy, error) {
	p, _, err := ReadPolicy(path)
	return p, err
}

// ReadPolicy is LoadPolicy that also returns the sha256 digest of the
// file's bytes: "" where there are none (AcceptAll), set even where they
// fail to parse.
func ReadPolicy(path string) (*Policy, digest.Digest, error) {
	if path == "" {
		return AcceptAll(), "", nil
	}
	raw, err := readBounded(path, MaxPolicyBytes)
	if errors.Is(err, os.ErrNotExist) && path == DefaultPolicyPath {
		return AcceptAll(), "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("policy: %w", err)
	}
	dgst := digest.FromBytes(raw)
	p, err := ParsePolicy(path, raw, filepath.Dir(path))
	return p, dgst, err
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes: %w", path, limit, errdefs.ErrInvalidArgument)
	}
	return raw, nil
}

// ParsePolicy decodes a policy; name labels errors, and relative key and
// CA paths are read relative to dir. Unknown members, a member named
// twice, and anything after the object are refused, each error naming
// its line.
func ParsePolicy(name string, raw []byte, dir string) (*Policy, error) {
	if len(raw) > MaxPolicyBytes {
		return nil, &PolicyError{File: name, Line: 1, Column: 1, Msg: fmt.Sprintf("larger than %d bytes", MaxPolicyBytes)}
	}
	p := &Policy{File: name, Docker: map[string][]Requirement{}}
	w := newWalker(name, raw)
	pr := &policyReader{w: w, dir: dir}
	sawDefault := false
	err := w.object("policy", func(key string, at int64) error {
		switch key {
		case "default":
			sawDefault = true
			reqs, err := pr.requirements("default", at)
			p.Default = reqs
			return err
		case "transports":
			return w.object("transports", func(transport string, at int64) error {
				scopes := map[string][]Requirement{}
				n := 0
				err := w.object("transport "+transport, func(scope string, at int64) error {
					if n++; n > MaxScopes {
						return w.errAt(at, "transport %s: more than %d scopes", transport, MaxScopes)
					}
					if transport == "docker" {
						if err := validScope(scope); err != nil {
							return w.errAt(at, "scope %q: %v", scope, err)
						}
					}
					reqs, err := pr.requirements(fmt.Sprintf("scope %q", scope), at)
					scopes[scope] = reqs
					return err
				})
				if transport == "docker" {
					p.Docker = scopes
				}
				// Other transports (docker-daemon, oci, dir...) are checked
				// but never apply: weightsnap pulls only from registries.
				return err
			})
		default:
			return w.errAt(at, "unknown member %q (want default, transports)", key)
		}
	})
	if err != nil {
		return nil, err
	}
	if err := w.end(); err != nil {
		return nil, err
	}
	if !sawDefault {
		return nil, &PolicyError{File: name, Line: 1, Column: 1, Msg: `no "default" requirement list`}
	}
	return p, nil
}

// policyReader reads requirements, with the directory relative paths are
// read from.
type policyReader struct {
	w   *walker
	dir string
}

// requirements reads a non-empty list of requirements.
func (r *policyReader) requirements(what string, at int64) ([]Requirement, error) {
	var reqs []Requirement
	err := r.w.array(what, func(i int, at int64) error {
		if i >= MaxRequirements {
			return r.w.errAt(at, "%s: more than %d requirements", what, MaxRequirements)
		}
		req, err := r.requirement(what, at)
		reqs = append(reqs, req)
		return err
	})
	if err == nil && len(reqs) == 0 {
		return nil, r.w.errAt(at, "%s: an empty requirement list (use [{\"type\": \"reject\"}] or [{\"type\": \"insecureAcceptAnything\"}])", what)
	}
	return reqs, err
}

// requirement reads one requirement object.
func (r *policyReader) requirement(what string, start int64) (Requirement, error) {
	w := r.w
	line, _ := position(w.src, skipBlank(w.src, start))
	req := Requirement{Line: line}
	var (
		members  []string
		rekorSet bool
		keyKinds int
		identity *SignedIdentity
	)
	err := w.object(what, func(key string, at int64) error {
		members = append(members, key)
		switch key {
		case "type":
			s, err := w.str("type")
			req.Type = s
			switch s {
			case TypeAcceptAnything, TypeReject, TypeSigstoreSigned:
			case "signedBy":
				return w.errAt(at, "type signedBy (GPG signatures) is not supported: use sigstoreSigned")
			default:
				if err == nil {
					return w.errAt(at, "unknown requirement type %q (want insecureAcceptAnything, reject or sigstoreSigned)", s)
				}
			}
			return err
		case "keyPath", "rekorPublicKeyPath":
			p, err := w.str(key)
			if err != nil {
				return err
			}
			pem, err := r.file(p, MaxKeyBytes, key, at)
			if key == "keyPath" {
				keyKinds++
				req.Keys = append(req.Keys, Key{Source: p, PEM: pem})
			} else {
				rekorSet = true
				req.RekorKeys = append(req.RekorKeys, pem)
			}
			return err
		case "keyPaths", "rekorPublicKeyPaths":
			paths, err := w.strings(key)
			if err != nil {
				return err
			}
			if len(paths) == 0 || len(paths) > MaxKeysPerPolicy {
				return w.errAt(at, "%s: want 1 to %d paths", key, MaxKeysPerPolicy)
			}
			for _, p := range paths {
				pem, err := r.file(p, MaxKeyBytes, key, at)
				if err != nil {
					return err
				}
				if key == "keyPaths" {
					req.Keys = append(req.Keys, Key{Source: p, PEM: pem})
				} else {
					req.RekorKeys = append(req.RekorKeys, pem)
				}
			}
			if key == "keyPaths" {
				keyKinds++
			} else {
				rekorSet = true
			}
			return nil
		case "keyData", "rekorPublicKeyData":
			pem, err := r.data(key, MaxKeyBytes)
			if key == "keyData" {
				keyKinds++
				req.Keys = append(req.Keys, Key{Source: "keyData", PEM: pem})
			} else {
				rekorSet = true
				req.RekorKeys = append(req.RekorKeys, pem)
			}
			return err
		case "keyDatas", "rekorPublicKeyDatas":
			n := 0
			err := w.array(key, func(i int, at int64) error {
				if n++; n > MaxKeysPerPolicy {
					return w.errAt(at, "%s: more than %d keys", key, MaxKeysPerPolicy)
				}
				pem, err := r.data(key, MaxKeyBytes)
				if key == "keyDatas" {
					req.Keys = append(req.Keys, Key{Source: "keyData", PEM: pem})
				} else {
					req.RekorKeys = append(req.RekorKeys, pem)
				}
				return err
			})
			if key == "keyDatas" {
				keyKinds++
			} else {
				rekorSet = true
			}
			return err
		case "fulcio":
			keyKinds++
			f, err := r.fulcio(at)
			req.Fulcio = f
			return err
		case "signedIdentity":
			id, err := r.signedIdentity(at)
			identity = &id
			return err
		case "pki":
			return w.errAt(at, "pki (X.509 certificates from a private CA) is not supported: use keyPath or fulcio")
		default:
			return w.errAt(at, "unknown member %q of a requirement", key)
		}
	})
	if err != nil {
		return req, err
	}
	fail := func(format string, args ...any) (Requirement, error) {
		return req, w.errAt(start, format, args...)
	}
	switch req.Type {
	case "":
		return fail("a requirement without a type")
	case TypeAcceptAnything, TypeReject:
		if len(members) != 1 {
			return fail("type %s takes no other member, got %s", req.Type, strings.Join(members, ", "))
		}
	case TypeSigstoreSigned:
		if keyKinds != 1 {
			return fail("sigstoreSigned needs exactly one of keyPath, keyPaths, keyData, keyDatas and fulcio")
		}
		if req.Fulcio != nil && !rekorSet {
			return fail("sigstoreSigned with fulcio needs rekorPublicKeyPath or rekorPublicKeyData (the transparency proof is checked offline)")
		}
		if identity != nil {
			req.Identity = *identity
		} else {
			req.Identity = SignedIdentity{Type: "matchRepoDigestOrExact"}
		}
	}
	return req, nil
}

// file reads a key or CA file the policy names.
func (r *policyReader) file(p string, limit int64, what string, at int64) ([]byte, error) {
	if p == "" {
		return nil, r.w.errAt(at, "%s is empty", what)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.dir, p)
	}
	raw, err := readBounded(p, limit)
	if err != nil {
		return nil, r.w.errAt(at, "%s: %v", what, err)
	}
	return raw, nil
}

// data reads a base64 string (keyData, caData).
func (r *policyReader) data(what string, limit int) ([]byte, error) {
	at := r.w.dec.InputOffset()
	s, err := r.w.str(what)
	if err != nil {
		return nil, err
	}
	if len(s) > base64.StdEncoding.EncodedLen(limit) {
		return nil, r.w.errAt(at, "%s: larger than %d bytes", what, limit)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, r.w.errAt(at, "%s: not base64: %v", what, err)
	}
	if len(raw) == 0 {
		return nil, r.w.errAt(at, "%s is empty", what)
	}
	return raw, nil
}

// fulcio reads the fulcio member.
func (r *policyReader) fulcio(start int64) (*Fulcio, error) {
	w := r.w
	f := &Fulcio{}
	err := w.object("fulcio", func(key string, at int64) error {
		var err error
		switch key {
		case "caPath":
			var p string
			if p, err = w.str(key); err == nil {
				f.CAPEM, err = r.file(p, MaxCABytes, key, at)
			}
		case "caData":
			f.CAPEM, err = r.data(key, MaxCABytes)
		case "oidcIssuer":
			f.OIDCIssuer, err = w.str(key)
		case "subjectEmail":
			f.SubjectEmail, err = w.str(key)
		default:
			return w.errAt(at, "unknown member %q of fulcio (want caPath, caData, oidcIssuer, subjectEmail)", key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if f.CAPEM == nil || f.OIDCIssuer == "" || f.SubjectEmail == "" {
		return nil, w.errAt(start, "fulcio needs caPath or caData, oidcIssuer and subjectEmail")
	}
	return f, nil
}

// signedIdentity reads the signedIdentity member.
func (r *policyReader) signedIdentity(start int64) (SignedIdentity, error) {
	w := r.w
	var id SignedIdentity
	var members []string
	err := w.object("signedIdentity", func(key string, at int64) error {
		members = append(members, key)
		var err error
		switch key {
		case "type":
			id.Type, err = w.str(key)
		case "dockerReference":
			id.DockerReference, err = w.str(key)
		case "dockerRepository":
			id.DockerRepository, err = w.str(key)
		case "prefix":
			id.Prefix, err = w.str(key)
		case "signedPrefix":
			id.SignedPrefix, err = w.str(key)
		default:
			return w.errAt(at, "unknown member %q of signedIdentity", key)
		}
		return err
	})
	if err != nil {
		return id, err
	}
	want := map[string][]string{
		"matchExact":             {"type"},
		"matchRepoDigestOrExact": {"type"},
		"matchRepository":        {"type"},
		"exactReference":         {"type", "dockerReference"},
		"exactRepository":        {"type", "dockerRepository"},
		"remapIdentity":          {"type", "prefix", "signedPrefix"},
	}
	need, ok := want[id.Type]
	if !ok {
		return id, w.errAt(start, "signedIdentity type %q (want matchExact, matchRepoDigestOrExact, matchRepository, exactReference, exactRepository or remapIdentity)", id.Type)
	}
	if len(members) != len(need) || !containsAll(members, need) {
		return id, w.errAt(start, "signedIdentity %s takes exactly %s", id.Type, strings.Join(need, ", "))
	}
	if err := id.validate(); err != nil {
		return id, w.errAt(start, "signedIdentity %s: %v", id.Type, err)
	}
	return id, nil
}

// skipBlank is the offset of the first byte at or after off that is not
// a blank or separator.
func skipBlank(src []byte, off int64) int64 {
	for off < int64(len(src)) && strings.IndexByte(" \t\r\n,:", src[off]) >= 0 {
		off++
	}
	return off
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
