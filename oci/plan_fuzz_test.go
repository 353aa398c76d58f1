package oci

import (
	"regexp"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FuzzPlan feeds registry bytes (a manifest and an index layer) to the pull
// planners: they never panic, and every file a plan accepts stays inside
// the artifact with a sha256 fingerprint and a sane size, and so does
// every tar layer.
func FuzzPlan(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"x","digest":"sha256:`+zeros+`","size":2},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:`+zeros+`","size":5,"annotations":{"org.opencontainers.image.title":"model.safetensors"}}]}`), []byte(`{}`))
	f.Add([]byte(`{"schemaVersion":2,"config":{},"layers":[{"digest":"sha256:`+zeros+`","size":-1,"annotations":{"org.opencontainers.image.title":"../x.safetensors"}}]}`), []byte(`{"schema":1}`))
	f.Add([]byte(`{"schemaVersion":2,"layers":[{"mediaType":"`+MediaTypeIndex+`","digest":"sha256:`+zeros+`","size":1}],"annotations":{"`+AnnotationIdentity+`":"{}"}}`), []byte(`{"schema":1,"identity":"","files":[]}`))
	f.Fuzz(func(t *testing.T, manifest, index []byte) {
		m, err := DecodeManifest("fuzz", manifest)
		if err != nil {
			return
		}
		var plans []*Plan
		if p, err := PlanWeightsnap("fuzz", m, index); err == nil {
			plans = append(plans, p)
		}
		if p, err := PlanForeign("fuzz", m, ImportOptions{Revision: "0123456789abcdef0123456789abcdef01234567"}); err == nil {
			plans = append(plans, p)
		}
		for _, p := range plans {
			for _, file := range p.Files {
				if artifact.ValidateRelPath(file.Path) != nil || file.Size < 0 || !sha256Hex.MatchString(file.SHA256) {
					t.Fatalf("plan accepted file %+v", file)
				}
			}
			for _, a := range p.Archives {
				if artifact.ValidateRelPath(a.Path) != nil || a.Path == "." || a.Layer.Size < 0 || a.Layer.Digest.Algorithm() != "sha256" {
					t.Fatalf("plan accepted tar layer %+v", a)
				}
			}
		}
	})
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"
