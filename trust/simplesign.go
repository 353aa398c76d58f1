package trust

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
)

// CosignV2SignatureType is the critical.type of cosign v2's simple-signing payload.
const CosignV2SignatureType = "cosign container image signature"

// MaxSimplePayloadBytes bounds a cosign v2 simple-signing payload.
const MaxSimplePayloadBytes = 64 << 10

// simplePayload is cosign v2's simple-signing payload (the layer of a
// sha256-<hex>.sig image); optional is free-form.
type simplePayload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional json.RawMessage `json:"optional"`
}

// checkSimple verifies a cosign v2 signature (Signature.Payload and its
// base64 Signature.Sig) with a key verifier: the signature over the
// payload, the payload's manifest digest, and that it names repo (the
// repository the artifact was read from; matchRepoDigestOrExact).
func checkSimple(s Signature, v verifier, manifest digest.Digest, repo string) error {
	if v.sv == nil {
		return fmt.Errorf("cosign v2 signatures are checked with keys only, not certificates")
	}
	if len(s.Payload) > MaxSimplePayloadBytes {
		return fmt.Errorf("payload larger than %d bytes", MaxSimplePayloadBytes)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Sig)
	if err != nil {
		return fmt.Errorf("signature annotation is not base64: %v", err)
	}
	if err := v.sv.VerifySignature(bytes.NewReader(sig), bytes.NewReader(s.Payload)); err != nil {
		return fmt.Errorf("signature: %v", err)
	}
	var p simplePayload
	dec := json.NewDecoder(bytes.NewReader(s.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("payload: %v", err)
	}
	switch {
	case p.Critical.Type != CosignV2SignatureType:
		return fmt.Errorf("payload type %q", p.Critical.Type)
	case p.Critical.Image.DockerManifestDigest != manifest.String():
		return fmt.Errorf("signs manifest %s, not %s", p.Critical.Image.DockerManifestDigest, manifest)
	case repo != "" && p.Critical.Identity.DockerReference != repo:
		return fmt.Errorf("names %q, not %s (signedIdentity matchRepoDigestOrExact)", p.Critical.Identity.DockerReference, repo)
	}
	return nil
}
