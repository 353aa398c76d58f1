package main

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

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// TestVerifyPolicyCommand: `weightsnap verify-policy FILE` lists a good
// policy's scopes, names the line of what is wrong with a bad one (bad
// input), and says a missing default policy accepts unverified.
func TestVerifyPolicyCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"default": [{"type": "reject"}], "transports": {"docker": {"example.com/team": [{"type": "insecureAcceptAnything"}]}}}`), 0o644)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\"default\": [{\"type\": \"reject\"}],\n\"transports\": {\"docker\": {\n  \"example.com/team\": [{\"type\": \"sigstoreSigned\"}]}}}"), 0o644)
	out, err := runCLI(t, "--config", "", "verify-policy", good)
	if err != nil || !strings.Contains(out, "ok: default reject") || !strings.Contains(out, `"example.com/team": insecureAcceptAnything`) {
		t.Fatalf("%v\n%s", err, out)
	}
	warn := filepath.Join(dir, "warn.json")
	os.WriteFile(warn, []byte(`{"default": [{"type": "reject"}], "transports": {"docker": {"example.com/team": [
		{"type": "sigstoreSigned", "keyData": "`+base64.StdEncoding.EncodeToString(func() []byte { _, pub := testKey(t); return pub }())+`", "signedIdentity": {"type": "matchRepository"}}]}}}`), 0o644)
	out, err = runCLI(t, "--config", "", "verify-policy", warn)
	if err != nil || !strings.Contains(out, `warning: scope "example.com/team" (line 2): met only by cosign's legacy signatures`) {
		t.Fatalf("a scope bundles cannot meet: %v\n%s", err, out)
	}
	_, err = runCLI(t, "--config", "", "verify-policy", bad)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("want bad input at line 3, got %v", err)
	}
}

// TestInspectAndVerifySignatures: inspect shows how an artifact was
// verified (the recorded scope, key and signature), "unverified" for one
// without a record, in text and JSON; verify --signatures checks the
// record again under the current policy, offline: valid under the key
// that signed, refused under another.
func TestInspectAndVerifySignatures(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	var ids []string
	for seed := range uint64(2) {
		src := filepath.Join(base, fmt.Sprint("src", seed))
		if err := synth.Write(ctx, src, synth.Options{Size: 256 << 10, Shards: 1, DType: "F16", Seed: seed + 1}); err != nil {
			t.Fatal(err)
		}
		out, err := runCLI(t, "--config", "", "--root", root, "import", src, "--revision", strings.Repeat("cd", 20))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	d, err := store.OpenExisting(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := d.ExpandID(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// The record a verified pull keeps: a manifest, a bundle over it.
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`)
	md := digest.FromBytes(manifest)
	key, pub := testKey(t)
	_, otherPub := testKey(t)
	bundle, err := trust.SignManifest(ctx, key, md)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(name string, pub []byte) string {
		return policyConfig(t, base, name, `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"reg.example/models/x": [{"type": "sigstoreSigned", "keyData": "`+base64.StdEncoding.EncodeToString(pub)+`"}]}}}`)
	}
	good, other := policy("good.json", pub), policy("other.json", otherPub)
	pol, err := trust.LoadPolicy(filepath.Join(base, "good.json"))
	if err != nil {
		t.Fatal(err)
	}
	ref := "reg.example/models/x@" + md.String()
	m, _ := pol.MatchRef(ref)
	sigs := []trust.Signature{{Source: "signature referrer", Raw: bundle}}
	v, err := trust.VerifyManifest(m, md, "reg.example/models/x", sigs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := oci.KeepRecord(ctx, d, id, trust.NewRecord(ref, manifest, sigs, v)); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, "--config", good, "--root", root, "inspect", ids[0])
	if err != nil || !strings.Contains(out, "Verified:  verified\n  "+ref+"\n") || !strings.Contains(out, "by key "+v[0].Key) {
		t.Fatalf("inspect of a verified artifact: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--config", good, "--root", root, "inspect", ids[1])
	if err != nil || !strings.Contains(out, "Verified:  unverified\n") {
		t.Fatalf("inspect of an unverified artifact: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--config", good, "--root", root, "inspect", ids[0], "--json")
	var j struct {
		Verification verification `json:"verification"`
	}
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.Verification.Status != statusVerified ||
		len(j.Verification.Records) != 1 || j.Verification.Records[0].Manifest != md.String() || j.Verification.Records[0].Verified[0].Key != v[0].Key {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--config", good, "--root", root, "verify", "--signatures", "--all")
	if err != nil || !strings.Contains(out, "signatures: valid under") || !strings.Contains(out, "signatures: unverified (none recorded)") {
		t.Fatalf("verify --signatures --all: %v\n%s", err, out)
	}
	out, err = runCLI(t, "--config", other, "--root", root, "verify", "--signatures", ids[0])
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(out, `scope "reg.example/models/x" refuses it`) {
		t.Fatalf("verify --signatures under another key: %v\n%s", err, out)
	}
}

// testKey is a new signing key and its public key (PEM).
func testKey(t *testing.T) (crypto.Signer, []byte) { return storetest.SigningKey(t) }

// policyConfig writes the trust policy doc as base/name and a
// configuration file naming it, and returns the configuration's path.
func policyConfig(t *testing.T, base, name, doc string) string {
	t.Helper()
	p := filepath.Join(base, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(base, name+".toml")
	if err := os.WriteFile(cfg, []byte("[verify]\npolicy = \""+p+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}
