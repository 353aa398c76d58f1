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

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/trust"
)

// omsBundle signs an OMS v1.0 statement (method files, sha256) over the
// files of dir, except skip, with key.
func omsBundle(t *testing.T, key crypto.Signer, dir string, skip ...string) []byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []artifact.File
	for _, e := range entries {
		if slices.Contains(skip, e.Name()) || e.Name() == trust.OMSBundleFile {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		files = append(files, artifact.File{Path: e.Name(), SHA256: hex.EncodeToString(sum[:])})
	}
	return storetest.OMSBundle(t, key, files)
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
			if err := os.WriteFile(filepath.Join(d, trust.OMSBundleFile), sig(d), 0o644); err != nil {
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

// TestImportRecordsModelSig: an import whose model.sig met a policy that
// requires a signature keeps the record before publication: inspect shows
// it (scope, key, bundle digest) in text and JSON, verify --signatures
// checks it again against the store's index under the current policy
// (valid under the key, refused under another), and rm removes it. One
// accepted by a scope that wants no signature records nothing.
func TestImportRecordsModelSig(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	key, pub := testKey(t)
	_, otherPub := testKey(t)
	policy := func(name string, pub []byte) string {
		return policyConfig(t, base, name, `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"reg.example/models": [{"type": "sigstoreSigned", "keyData": "`+base64.StdEncoding.EncodeToString(pub)+`"}]}}}`)
	}
	good, other := policy("good.json", pub), policy("other.json", otherPub)
	src := filepath.Join(base, "m")
	if err := synth.Write(ctx, src, synth.Options{Size: 256 << 10, Shards: 1, DType: "F16", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, trust.OMSBundleFile), omsBundle(t, key, src), 0o644); err != nil {
		t.Fatal(err)
	}
	rev := strings.Repeat("cd", 20)
	for _, tc := range []struct {
		name, repo, scope string
		recorded          bool
	}{
		{"a scope that requires the key", "reg.example/models/x", "reg.example/models", true},
		{"a scope that wants none", "org/x", "default", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			ws := func(cfg string, args ...string) (string, error) {
				return runCLI(t, append([]string{"--config", cfg, "--root", root}, args...)...)
			}
			out, err := ws(good, "import", src, "--revision", rev, "--repository", tc.repo, "--json")
			var res importResult
			if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Verified) != 1 || res.Verified[0].Scope != tc.scope {
				t.Fatalf("import: %v\n%s", err, out)
			}
			id := res.ID.String()
			out, err = ws(good, "inspect", id, "--json")
			var j struct {
				Verification verification `json:"verification"`
			}
			if err != nil || json.Unmarshal([]byte(out), &j) != nil {
				t.Fatalf("inspect --json: %v\n%s", err, out)
			}
			if !tc.recorded {
				if j.Verification.Status != statusUnverified || len(j.Verification.Records) != 0 {
					t.Fatalf("an unsigned scope's import recorded %+v", j.Verification)
				}
				return
			}
			r := j.Verification.Records
			if j.Verification.Status != statusVerified || len(r) != 1 || r[0].Kind != trust.KindOMS || r[0].Ref != tc.repo ||
				r[0].Scope != tc.scope || !strings.HasPrefix(r[0].Bundle, "sha256:") || r[0].Manifest != "" ||
				r[0].Verified[0].Key != res.Verified[0].Key || r[0].Verified[0].Signature.String() != r[0].Bundle {
				t.Fatalf("inspect --json: %+v", j.Verification)
			}
			out, err = ws(good, "inspect", id)
			if err != nil || !strings.Contains(out, "Verified:  verified\n  model.sig over the files ("+tc.repo+"), bundle "+r[0].Bundle) ||
				!strings.Contains(out, "by key "+res.Verified[0].Key) {
				t.Fatalf("inspect: %v\n%s", err, out)
			}
			if out, err = ws(good, "verify", "--signatures", "--all"); err != nil || !strings.Contains(out, "signatures: valid under") {
				t.Fatalf("verify --signatures --all: %v\n%s", err, out)
			}
			if out, err = ws(other, "verify", "--signatures", id); err == nil || !strings.Contains(out, `scope "`+tc.scope+`" refuses it`) {
				t.Fatalf("verify --signatures under another key: %v\n%s", err, out)
			}
			kept := filepath.Join(root, "signatures", "*.json")
			if held, _ := filepath.Glob(kept); len(held) != 1 {
				t.Fatalf("records in the store: %v", held)
			}
			if _, err := ws(good, "rm", id); err != nil {
				t.Fatal(err)
			}
			if left, _ := filepath.Glob(kept); len(left) > 0 {
				t.Fatalf("rm left the record: %v", left)
			}
		})
	}
}
