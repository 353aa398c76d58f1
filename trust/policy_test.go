package trust

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
)

const testPEM = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"

// TestParsePolicyErrors: each bad policy is refused as invalid input, and
// the error names the line the problem is on.
func TestParsePolicyErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k.pub"), []byte(testPEM), 0o644)
	for _, tc := range []struct {
		name, doc string
		line      int
		msg       string
	}{
		{"unknown top", "{\n \"default\": [{\"type\": \"reject\"}],\n \"bogus\": 1\n}", 3, `unknown member "bogus"`},
		{"unknown req member", "{\"default\": [\n{\"type\": \"reject\",\n \"keyPath\": \"k.pub\"}]}", 2, "takes no other member"},
		{"no default", "{\"transports\": {}}", 1, `no "default"`},
		{"empty list", "{\n\"default\": []}", 2, "empty requirement list"},
		{"bad type", "{\"default\": [\n\n{\"type\": \"maybe\"}]}", 3, `unknown requirement type "maybe"`},
		{"gpg", "{\"default\": [{\"type\": \"signedBy\", \"keyType\": \"GPGKeys\"}]}", 1, "signedBy (GPG"},
		{"missing key file", "{\"default\": [{\"type\": \"reject\"}],\n\"transports\": {\"docker\": {\"example.com/a\": [\n{\"type\": \"sigstoreSigned\", \"keyPath\": \"nope.pub\"}]}}}", 3, "keyPath"},
		{"two key kinds", "{\"default\": [{\"type\": \"reject\"}],\n\"transports\": {\"docker\": {\"example.com/a\": [\n{\"type\": \"sigstoreSigned\", \"keyPath\": \"k.pub\", \"keyData\": \"" + base64.StdEncoding.EncodeToString([]byte(testPEM)) + "\"}]}}}", 3, "exactly one of"},
		{"no key", "{\"default\": [{\"type\": \"sigstoreSigned\"}]}", 1, "exactly one of"},
		{"fulcio without rekor", "{\"default\": [{\"type\": \"sigstoreSigned\", \"fulcio\": {\"caData\": \"eA==\", \"oidcIssuer\": \"https://i\", \"subjectEmail\": \"a@b\"}}]}", 1, "rekorPublicKey"},
		{"fulcio without issuer", "{\"default\": [{\"type\": \"sigstoreSigned\", \"rekorPublicKeyPath\": \"k.pub\",\n \"fulcio\": {\"caData\": \"eA==\", \"subjectEmail\": \"a@b\"}}]}", 2, "oidcIssuer"},
		{"bad base64", "{\"default\": [{\"type\": \"sigstoreSigned\",\n\"keyData\": \"!!!\"}]}", 2, "not base64"},
		{"short scope", "{\"default\": [{\"type\": \"reject\"}], \"transports\": {\"docker\": {\n\"busybox/x\": [{\"type\": \"reject\"}]}}}", 2, "not fully qualified"},
		{"tag and digest scope", "{\"default\": [{\"type\": \"reject\"}], \"transports\": {\"docker\": {\n\"example.com/a:v1@sha256:" + strings.Repeat("a", 64) + "\": [{\"type\": \"reject\"}]}}}", 2, "not both"},
		{"exactReference without tag", `{"default": [{"type": "sigstoreSigned", "keyData": "eA==", "signedIdentity": {"type": "exactReference", "dockerReference": "example.com/a"}}]}`, 1, "neither a tag nor a digest"},
		{"remapIdentity bad prefix", `{"default": [{"type": "sigstoreSigned", "keyData": "eA==", "signedIdentity": {"type": "remapIdentity", "prefix": "example.com/A", "signedPrefix": "example.org"}}]}`, 1, "prefix"},
		{"bad identity", "{\"default\": [{\"type\": \"sigstoreSigned\", \"keyPath\": \"k.pub\",\n\"signedIdentity\": {\"type\": \"exactReference\"}}]}", 2, "takes exactly"},
		{"twice", "{\"default\": [{\"type\": \"reject\"}],\n\"default\": [{\"type\": \"reject\"}]}", 2, "named twice"},
		{"syntax", "{\"default\": [{\"type\": \"reject\"}]\n,,}", 2, "invalid character"},
		{"trailing", "{\"default\": [{\"type\": \"reject\"}]}\n{}", 2, "data after"},
		{"truncated", "{\"default\": [{\"type\": ", 1, "end of file"},
		{"wrong kind", "{\"default\": {\"type\": \"reject\"}}", 1, `want "["`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy("p.json", []byte(tc.doc), dir)
			var pe *PolicyError
			if !errors.As(err, &pe) || !errdefs.IsInvalidArgument(err) {
				t.Fatalf("want a PolicyError, got %v", err)
			}
			if pe.Line != tc.line || !strings.Contains(pe.Msg, tc.msg) {
				t.Fatalf("want line %d %q, got %v", tc.line, tc.msg, err)
			}
		})
	}
}

// TestPolicyFor: the most specific scope applies, in containers-policy.json's order.
func TestPolicyFor(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k.pub"), []byte(testPEM), 0o644)
	doc := `{
  "default": [{"type": "reject"}],
  "transports": {
    "docker": {
      "reg.example.com/team/model:prod": [{"type": "sigstoreSigned", "keyPath": "k.pub"}],
      "reg.example.com/team/model": [{"type": "sigstoreSigned", "keyData": "` + base64.StdEncoding.EncodeToString([]byte(testPEM)) + `", "signedIdentity": {"type": "matchRepository"}}],
      "reg.example.com/team/model@sha256:` + strings.Repeat("b", 64) + `": [{"type": "reject"}],
      "reg.example.com/team": [{"type": "insecureAcceptAnything"}],
      "127.0.0.1:5000": [{"type": "insecureAcceptAnything"}],
      "*.example.com": [{"type": "reject"}],
      "": [{"type": "insecureAcceptAnything"}]
    },
    "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]}
  }
}`
	p, err := ParsePolicy("p.json", []byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, scope, typ string }{
		{"reg.example.com/team/model:prod", "reg.example.com/team/model:prod", TypeSigstoreSigned},
		{"reg.example.com/team/model:dev", "reg.example.com/team/model", TypeSigstoreSigned},
		{"reg.example.com/team/model@sha256:" + strings.Repeat("a", 64), "reg.example.com/team/model", TypeSigstoreSigned},
		{"reg.example.com/team/model@sha256:" + strings.Repeat("b", 64), "reg.example.com/team/model@sha256:" + strings.Repeat("b", 64), TypeReject},
		{"reg.example.com/team/other/x:1", "reg.example.com/team", TypeAcceptAnything},
		{"reg.example.com/elsewhere:1", "*.example.com", TypeReject},
		{"a.b.example.com/x", "*.example.com", TypeReject},
		{"127.0.0.1:5000/any/thing:1", "127.0.0.1:5000", TypeAcceptAnything},
		{"quay.io/x/y", "", TypeAcceptAnything},
	} {
		ref, err := reference.ParseNormalizedNamed(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		m := p.For(ref)
		if m.Scope != tc.scope || m.Requirements[0].Type != tc.typ {
			t.Fatalf("%s: got scope %q %s, want %q %s", tc.ref, m.Scope, m.Requirements[0].Type, tc.scope, tc.typ)
		}
	}
	if id := p.Docker["reg.example.com/team/model:prod"][0].Identity.Type; id != "matchRepoDigestOrExact" {
		t.Fatalf("default signedIdentity: %s", id)
	}
	if k := p.Docker["reg.example.com/team/model:prod"][0].Keys; len(k) != 1 || string(k[0].PEM) != testPEM {
		t.Fatalf("keyPath not read: %+v", k)
	}
}

// TestLoadPolicyAbsent: no file at the default path accepts everything as
// unverified; a named missing file is an error.
func TestLoadPolicyAbsent(t *testing.T) {
	if _, err := os.Stat(DefaultPolicyPath); err == nil {
		t.Skip(DefaultPolicyPath + " exists on this machine")
	}
	p, err := LoadPolicy(DefaultPolicyPath)
	if err != nil || !p.Unverified || p.Default[0].Type != TypeAcceptAnything {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := LoadPolicy(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a named missing policy was accepted")
	}
}
