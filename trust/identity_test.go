package trust

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// TestBundleMeets: a cosign v3 bundle meets matchRepoDigestOrExact and
// matchExact for a pull by digest only, and no other signedIdentity.
func TestBundleMeets(t *testing.T) {
	tag := "reg.example/a/b:v1"
	dig := "reg.example/a/b@sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		id   SignedIdentity
		ref  string
		want bool
	}{
		{SignedIdentity{Type: IdentityMatchRepoDigestOrExact}, dig, true},
		{SignedIdentity{Type: IdentityMatchExact}, dig, true},
		{SignedIdentity{Type: IdentityMatchRepoDigestOrExact}, tag, false},
		{SignedIdentity{Type: IdentityMatchExact}, tag, false},
		{SignedIdentity{Type: IdentityMatchRepoDigestOrExact}, tag + "@sha256:" + strings.Repeat("a", 64), false},
		{SignedIdentity{Type: IdentityMatchRepository}, dig, false},
		{SignedIdentity{Type: IdentityExactReference, DockerReference: dig}, dig, false},
		{SignedIdentity{Type: IdentityExactRepository, DockerRepository: "reg.example/a/b"}, dig, false},
		{SignedIdentity{Type: IdentityRemapIdentity, Prefix: "reg.example", SignedPrefix: "reg.example"}, dig, false},
	} {
		named, err := reference.ParseNamed(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		ok, why := tc.id.BundleMeets(named)
		if ok != tc.want || ok != (why == "") || (!ok && !strings.Contains(why, "names only the manifest digest")) {
			t.Errorf("%s for %s: %v %q, want %v", tc.id.Type, tc.ref, ok, why, tc.want)
		}
	}
}

// TestPolicyWarnings: verify-policy's warnings name each requirement the
// signatures weightsnap reads meet never, or never by a bundle, with its
// scope and line; a requirement a bundle meets by digest has none.
func TestPolicyWarnings(t *testing.T) {
	ca := `"fulcio": {"caData": "` + b64(testPEM) + `", "oidcIssuer": "https://issuer", "subjectEmail": "a@b"}, "rekorPublicKeyData": "` + b64(testPEM) + `"`
	key := `"keyData": "` + b64(testPEM) + `"`
	for _, tc := range []struct {
		name, scope, req, want string // want "" for no warning
	}{
		{"key, default identity", "reg.example/a", key, ""},
		{"key, matchRepository", "reg.example/a", key + `, "signedIdentity": {"type": "matchRepository"}`, "met only by cosign's legacy signatures"},
		{"key, tag scope", "reg.example/a:v1", key, "naming the tag"},
		{"fulcio, default identity", "reg.example/a", ca, ""},
		{"fulcio, matchRepository", "reg.example/a", ca + `, "signedIdentity": {"type": "matchRepository"}`, "never met"},
		{"fulcio, tag scope", "reg.example/a:v1", ca, "never met"},
		{"key and rekor, matchRepository", "reg.example/a", key + `, "rekorPublicKeyData": "` + b64(testPEM) + `", "signedIdentity": {"type": "matchRepository"}`, "never met"},
	} {
		doc := `{"default": [{"type": "reject"}], "transports": {"docker": {"` + tc.scope + `": [{"type": "sigstoreSigned", ` + tc.req + `}]}}}`
		p, err := ParsePolicy("p.json", []byte(doc), t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ws := p.Warnings()
		if tc.want == "" {
			if len(ws) != 0 {
				t.Errorf("%s: %v", tc.name, ws)
			}
			continue
		}
		if len(ws) != 1 || ws[0].Scope != tc.scope || ws[0].Line != 1 || !strings.Contains(ws[0].Msg, tc.want) {
			t.Errorf("%s: %v, want one of scope %s with %q", tc.name, ws, tc.scope, tc.want)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
