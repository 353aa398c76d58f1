package trust

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/distribution/reference"
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
// payload, the payload's manifest digest, and that the image it names
// meets id for an image used by intended.
func checkSimple(s Signature, v verifier, manifest digest.Digest, id SignedIdentity, intended reference.Named) error {
	if v.sv == nil {
		return fmt.Errorf("cosign v2 signatures are checked with keys only, not certificates")
	}
	if v.logged {
		return fmt.Errorf("the requirement wants a transparency-log entry (rekorPublicKey), which weightsnap does not read for cosign v2 signatures")
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
	switch signed := p.Critical.Identity.DockerReference; {
	case !validOptional(p.Optional):
		return fmt.Errorf("payload: optional is not null or an object with a string creator and an integer timestamp")
	case p.Critical.Type != CosignV2SignatureType:
		return fmt.Errorf("payload type %q", p.Critical.Type)
	case p.Critical.Image.DockerManifestDigest != manifest.String():
		return fmt.Errorf("signs manifest %s, not %s", p.Critical.Image.DockerManifestDigest, manifest)
	case !id.Matches(intended, signed):
		return fmt.Errorf("names %q, which signedIdentity %s does not accept for %s", signed, id.Type, intended)
	}
	return nil
}

// validOptional says whether a payload's optional member is what
// containers/image accepts: null, or an object whose creator, if any, is
// a string and whose timestamp, if any, is an integer.
func validOptional(raw json.RawMessage) bool {
	if raw == nil {
		return false
	}
	if bytes.Equal(raw, []byte("null")) {
		return true
	}
	var o map[string]json.RawMessage
	if err := json.Unmarshal(raw, &o); err != nil || o == nil {
		return false
	}
	if c, ok := o["creator"]; ok {
		var s string
		if json.Unmarshal(c, &s) != nil {
			return false
		}
	}
	if t, ok := o["timestamp"]; ok {
		var f float64
		if json.Unmarshal(t, &f) != nil || f != float64(int64(f)) {
			return false
		}
	}
	return true
}
