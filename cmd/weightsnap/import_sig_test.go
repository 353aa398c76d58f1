package main

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/trust"
)

// omsBundle signs an OMS v1.0 statement (method files, sha256) over the
// files of dir, except skip, with key.
func omsBundle(t *testing.T, key crypto.Signer, dir string, skip ...string) []byte {
	t.Helper()
	var names []string
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if slices.Contains(skip, e.Name()) || e.Name() == trust.OMSSignatureFile {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		files[e.Name()] = hex.EncodeToString(sum[:])
		names = append(names, e.Name())
	}
	slices.Sort(names)
	var res []map[string]string
	var root []byte
	for _, n := range names {
		res = append(res, map[string]string{"name": n, "digest": files[n], "algorithm": "sha256"})
		d, _ := hex.DecodeString(files[n])
		root = append(root, d...)
	}
	sum := sha256.Sum256(root)
	st, _ := json.Marshal(map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "predicateType": trust.OMSPredicateType,
		"subject":   []map[string]any{{"name": "m", "digest": map[string]string{"sha256": hex.EncodeToString(sum[:])}}},
		"predicate": map[string]any{"resources": res, "serialization": map[string]any{"method": "files", "hash_type": "sha256", "allow_symlinks": false}},
	})
	b, err := trust.SignDSSE(context.Background(), key, trust.InTotoPayloadType, st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestImportChecksModelSig: weightsnap import of a directory with a
// model.sig checks it against the digests the store computed, before
// anything is published: under a policy that requires the key, a bundle
// by it over exactly the files imports and says how; one by another key,
// one that leaves a file unsigned, and a directory without a model.sig
// are refused naming the scope, and the store holds nothing of them;
// without a policy, a model.sig that does not name the files is refused
// too, and a directory without one imports as before.
func TestImportChecksModelSig(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	key, pub := testKey(t)
	other, _ := testKey(t)
	required := policyConfig(t, base, "policy.json", `{"default": [{"type": "sigstoreSigned", "keyData": "`+base64.StdEncoding.EncodeToString(pub)+`"}]}`)
	dir := func(name string, sig func(dir string) []byte) string {
		d := filepath.Join(base, name)
		if err := synth.Write(ctx, d, synth.Options{Size: 256 << 10, Shards: 1, DType: "F16", Seed: uint64(len(name))}); err != nil {
			t.Fatal(err)
		}
		if sig != nil {
			if err := os.WriteFile(filepath.Join(d, trust.OMSSignatureFile), sig(d), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	signedBy := func(k crypto.Signer, skip ...string) func(string) []byte {
		return func(d string) []byte { return omsBundle(t, k, d, skip...) }
	}
	good := dir("good", signedBy(key))
	extra := dir("extra", signedBy(key))
	os.WriteFile(filepath.Join(extra, "notes.txt"), []byte("added after signing"), 0o644)
	for _, tc := range []struct {
		name, config, dir, want string
	}{
		{"signed by the key", required, good, ""},
		{"signed by another key", required, dir("otherkey", signedBy(other)), "no signature by a key or identity"},
		{"an unsigned extra file", required, extra, "unsigned files: notes.txt"},
		{"no model.sig", required, dir("bare", nil), "no model.sig"},
		{"no policy, an unsigned extra file", "", extra, "unsigned files: notes.txt"},
		{"no policy, no model.sig", "", dir("plain", nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			out, err := runCLI(t, "--config", tc.config, "--root", root, "import", tc.dir, "--revision", strings.Repeat("cd", 20), "--json")
			if tc.want == "" {
				var res importResult
				if err != nil || json.Unmarshal([]byte(out), &res) != nil {
					t.Fatalf("import: %v\n%s", err, out)
				}
				if tc.config != "" && (len(res.Verified) != 1 || res.Verified[0].Type != trust.TypeSigstoreSigned || res.Verified[0].Key == "") {
					t.Fatalf("how it was verified: %+v", res.Verified)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.config != "" && !strings.Contains(err.Error(), `scope "default"`)) {
				t.Fatalf("import: %v, want a refusal with %q", err, tc.want)
			}
			if ls, err := runCLI(t, "--config", "", "--root", root, "ls", "--json"); err == nil && strings.Contains(ls, "sha256:") {
				t.Fatalf("a refused import published:\n%s", ls)
			}
		})
	}
}
