//go:build containers_image_openpgp

package oci

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containers/image/v5/signature"
	"github.com/containers/image/v5/types"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/internal/cireference"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/trust"
)

// TestPolicyDecidesAsContainersImage runs containers/image's own
// decision (signature.PolicyContext.IsRunningImageAllowed over its docker
// transport, reading cosign's sha256-<hex>.sig attachments) beside
// weightsnap's (the scope trust.Policy.For picks, trust.VerifyManifest
// over the signatures FindSignatures reads) on one registry, over every
// policy × reference × signature of the matrix, and fails on any pair
// that differs. The signatures are cosign's legacy simple signatures,
// made as cosign writes them: naming the repository (cosign's default),
// or a tag or digest reference (--sign-container-identity).
func TestPolicyDecidesAsContainersImage(t *testing.T) {
	ctx := context.Background()
	keyA, pubA := signKey(t)
	keyB, pubB := signKey(t)
	dir := t.TempDir()
	pubAPath, pubBPath := filepath.Join(dir, "a.pub"), filepath.Join(dir, "b.pub")
	os.WriteFile(pubAPath, pubA, 0o644)
	os.WriteFile(pubBPath, pubB, 0o644)

	_, src := storetest.Checkpoint(t, 64<<10, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	host := f.host()

	// Each signature case has its own repositories, base/img (tags v1 and
	// v2) and base/mirror/img (tag v1), holding the same manifest and
	// the same cosign signature image.
	type sigCase struct {
		name string
		sigs []func(base string, d digest.Digest) (crypto.Signer, string, digest.Digest) // key, docker-reference, signed digest
	}
	by := func(k crypto.Signer, ref func(base string, d digest.Digest) string) func(string, digest.Digest) (crypto.Signer, string, digest.Digest) {
		return func(base string, d digest.Digest) (crypto.Signer, string, digest.Digest) { return k, ref(base, d), d }
	}
	repoOnly := func(b string, _ digest.Digest) string { return b + "/img" }
	tagV1 := func(b string, _ digest.Digest) string { return b + "/img:v1" }
	byDigest := func(b string, d digest.Digest) string { return b + "/img@" + d.String() }
	cases := []sigCase{
		{name: "unsigned"},
		{name: "A names repository", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, repoOnly)}},
		{name: "A names repo:v1", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, tagV1)}},
		{name: "A names repo:v2", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, func(b string, _ digest.Digest) string { return b + "/img:v2" })}},
		{name: "A names repo@digest", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, byDigest)}},
		{name: "A names another repo:v1", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, func(b string, _ digest.Digest) string { return b + "/other:v1" })}},
		{name: "A names mirror:v1", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyA, func(b string, _ digest.Digest) string { return b + "/mirror/img:v1" })}},
		{name: "B names repo:v1", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyB, tagV1)}},
		{name: "A names repo:v1 over another manifest", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){
			func(b string, _ digest.Digest) (crypto.Signer, string, digest.Digest) {
				return keyA, b + "/img:v1", digest.FromString("another manifest")
			}}},
		{name: "B names repository, A names repo:v1", sigs: []func(string, digest.Digest) (crypto.Signer, string, digest.Digest){by(keyB, repoOnly), by(keyA, tagV1)}},
	}

	type pulled struct {
		ref  string
		sigs []trust.Signature   // what FindSignatures read
		img  types.UnparsedImage // what containers/image reads
	}
	var manifest digest.Digest
	images := map[string][]pulled{} // by case name
	sys := cireference.System(t)
	for i, c := range cases {
		base := fmt.Sprintf("%s/c%d", host, i)
		for _, repoTag := range []string{"img:v1", "img:v2", "mirror/img:v1"} {
			r := remoteFor(t, f, fmt.Sprintf("c%d/%s", i, repoTag))
			if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
				t.Fatal(err)
			}
			desc, _, err := r.FetchManifest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			manifest = desc.Digest
			if strings.HasSuffix(repoTag, ":v2") {
				continue // the signature image is the repository's, pushed once per repository
			}
			var payloads [][]byte
			var keys []crypto.Signer
			for _, s := range c.sigs {
				k, named, d := s(base, desc.Digest)
				payloads = append(payloads, cosignPayload(named, d))
				keys = append(keys, k)
			}
			if len(payloads) > 0 {
				pushV2Signatures(t, r, desc, keys, payloads)
			}
		}
		for _, ref := range []string{base + "/img:v1", base + "/img:v2", base + "/img@" + manifest.String(), base + "/mirror/img:v1", base + "/mirror/img@" + manifest.String()} {
			r := remoteFor(t, f, strings.TrimPrefix(ref, host+"/"))
			desc, _, err := r.FetchManifest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sigs, err := FindSignatures(ctx, r, desc)
			if err != nil {
				t.Fatal(err)
			}
			images[c.name] = append(images[c.name], pulled{ref: ref, sigs: sigs, img: cireference.Open(t, sys, ref)})
		}
	}

	// The requirement lists, each placed at one scope of a policy whose
	// default rejects.
	sigstore := func(key, identity string) string {
		r := `{"type": "sigstoreSigned", ` + key
		if identity != "" {
			r += `, "signedIdentity": ` + identity
		}
		return r + `}`
	}
	keyA1 := `"keyPath": "` + pubAPath + `"`
	keyData := `"keyData": "` + base64.StdEncoding.EncodeToString(pubA) + `"`
	keysBA := `"keyPaths": ["` + pubBPath + `", "` + pubAPath + `"]`
	keyB1 := `"keyPath": "` + pubBPath + `"`
	requirements := func(base string) []string {
		return []string{
			`{"type": "insecureAcceptAnything"}`,
			`{"type": "reject"}`,
			sigstore(keyA1, ""),
			sigstore(keyData, `{"type": "matchRepoDigestOrExact"}`),
			sigstore(keyA1, `{"type": "matchExact"}`),
			sigstore(keyA1, `{"type": "matchRepository"}`),
			sigstore(keysBA, `{"type": "matchRepository"}`),
			sigstore(keyB1, ""),
			sigstore(keyA1+`, "rekorPublicKeyPath": "`+pubBPath+`"`, `{"type": "matchRepository"}`),
			sigstore(keyA1, `{"type": "exactReference", "dockerReference": "`+base+`/img:v1"}`),
			sigstore(keyA1, `{"type": "exactReference", "dockerReference": "`+base+`/img@`+manifest.String()+`"}`),
			sigstore(keyA1, `{"type": "exactRepository", "dockerRepository": "`+base+`/img"}`),
			sigstore(keyA1, `{"type": "exactRepository", "dockerRepository": "`+base+`/other"}`),
			sigstore(keyA1, `{"type": "remapIdentity", "prefix": "`+base+`/mirror", "signedPrefix": "`+base+`"}`),
			sigstore(keyA1, `{"type": "matchRepository"}`) + `, ` + sigstore(keyB1, `{"type": "matchRepository"}`),
		}
	}
	scopes := func(base string) []string {
		return []string{"default", "", host, base + "/img", base + "/img:v1", base + "/img@" + manifest.String(), base + "/mirror"}
	}

	now := time.Now()
	var pairs, accepted int
	for i, c := range cases {
		base := fmt.Sprintf("%s/c%d", host, i)
		for _, reqs := range requirements(base) {
			for _, scope := range scopes(base) {
				doc := `{"default": [{"type": "reject"}], "transports": {"docker": {"` + scope + `": [` + reqs + `]}}}`
				if scope == "default" {
					doc = `{"default": [` + reqs + `]}`
				}
				ours, err := trust.ParsePolicy("policy.json", []byte(doc), dir)
				if err != nil {
					t.Fatalf("%s: %v", doc, err)
				}
				theirs, err := signature.NewPolicyFromBytes([]byte(doc))
				if err != nil {
					t.Fatalf("containers/image: %s: %v", doc, err)
				}
				pc, err := signature.NewPolicyContext(theirs)
				if err != nil {
					t.Fatal(err)
				}
				for _, im := range images[c.name] {
					named, err := reference.ParseNamed(im.ref)
					if err != nil {
						t.Fatal(err)
					}
					_, ourErr := trust.VerifyManifest(ours.For(named), manifest, im.ref, im.sigs, now)
					allowed, theirErr := pc.IsRunningImageAllowed(ctx, im.img)
					pairs++
					if allowed {
						accepted++
					}
					if allowed != (ourErr == nil) {
						t.Errorf("%s, signature %q, policy %s:\n\tcontainers/image: %v %v\n\tweightsnap: %v", im.ref, c.name, doc, allowed, theirErr, ourErr)
					}
				}
				pc.Destroy()
			}
		}
	}
	t.Logf("%d pairs, %d accepted by containers/image", pairs, accepted)
	if accepted == 0 || accepted == pairs {
		t.Fatalf("a degenerate matrix: %d of %d accepted", accepted, pairs)
	}
}

// cosignPayload is the simple-signing payload cosign writes for a
// signature naming ref over the manifest d.
func cosignPayload(ref string, d digest.Digest) []byte {
	raw, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": ref},
			"image":    map[string]string{"docker-manifest-digest": d.String()},
			"type":     trust.CosignV2SignatureType,
		},
		"optional": nil,
	})
	return raw
}
