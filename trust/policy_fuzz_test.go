package trust

import (
	"errors"
	"testing"
)

// FuzzParsePolicy: any bytes either parse or are refused with a
// PolicyError naming a line within the input.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"default": [{"type": "reject"}]}`))
	f.Add([]byte(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"example.com/a:b": [{"type": "sigstoreSigned", "keyData": "eA==", "signedIdentity": {"type": "remapIdentity", "prefix": "a", "signedPrefix": "b"}}]}}}`))
	f.Add([]byte(`{"default": [{"type": "sigstoreSigned", "rekorPublicKeyData": "eA==", "fulcio": {"caData": "eA==", "oidcIssuer": "i", "subjectEmail": "e"}}]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParsePolicy("fuzz.json", raw, dir)
		if err == nil {
			if p.Default == nil {
				t.Fatal("parsed without a default")
			}
			return
		}
		var pe *PolicyError
		if !errors.As(err, &pe) {
			t.Fatalf("not a PolicyError: %v", err)
		}
		if pe.Line < 1 || pe.Line > 1+len(raw) {
			t.Fatalf("line %d out of range: %v", pe.Line, err)
		}
	})
}
