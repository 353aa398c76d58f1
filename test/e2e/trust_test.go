package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// cosignRun runs the pinned cosign CLI with COSIGN_PASSWORD set.
func cosignRun(t *testing.T, dir, password string, args ...string) (string, error) {
	t.Helper()
	bin := harness.Peers(t).Cosign(t)
	return harness.RunEnv([]string{"COSIGN_PASSWORD=" + password, "HOME=" + dir}, dir, append([]string{bin}, args...)...)
}

// TestCosignInterop: the real cosign CLI and
// weightsnap agree both ways, offline against the local registry (which
// has no referrers API: both use the referrers tag schema).
// `cosign verify --key` accepts an artifact pushed with
// `weightsnap push --sign-key`; an artifact signed with `cosign sign --key`
// passes `weightsnap verify-signature` by digest under a policy requiring
// that key, is refused by tag (a bundle names no tag), and fails under
// one requiring another key, naming the scope.
func TestCosignInterop(t *testing.T) {
	harness.Peers(t).Cosign(t)
	reg := harness.StartRegistry(t)
	keys := t.TempDir()
	for _, prefix := range []string{"k1", "k2"} {
		if out, err := cosignRun(t, keys, "pw", "generate-key-pair", "--output-key-prefix", prefix); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	_, root, id := ociCheckpoint(t, "4MiB", 1)
	http := []string{"--allow-http-registry", "--allow-insecure-registry"}

	// weightsnap signs, cosign verifies.
	ref := reg.Ref("models/signed:v1")
	r := runWS(t, []string{"COSIGN_PASSWORD=pw"}, []string{"--root", root, "--config", "", "push", "--plain-http", "--sign-key", filepath.Join(keys, "k1.key"), id, ref})
	if r.code != 0 {
		t.Fatalf("push --sign-key: exit %d\n%s", r.code, r.errOut)
	}
	pushed := strings.TrimSpace(r.out)
	out, err := cosignRun(t, keys, "", append(append([]string{"verify", "--key", filepath.Join(keys, "k1.pub")}, http...), "--insecure-ignore-tlog=true", pushed)...)
	if err != nil {
		t.Fatalf("cosign verify of a weightsnap push: %v\n%s", err, out)
	}
	if out, err := cosignRun(t, keys, "", append(append([]string{"verify", "--key", filepath.Join(keys, "k2.pub")}, http...), "--insecure-ignore-tlog=true", pushed)...); err == nil {
		t.Fatalf("cosign verify with another key accepted it:\n%s", out)
	}

	// cosign signs, weightsnap verifies.
	ref2 := reg.Ref("models/cosigned:v1")
	pushed2 := strings.TrimSpace(wsOK(t, root, "push", "--plain-http", id, ref2))
	if out, err := cosignRun(t, keys, "pw", append(append([]string{"sign", "--yes", "--key", filepath.Join(keys, "k1.key")}, http...),
		"--use-signing-config=false", "--tlog-upload=false", pushed2)...); err != nil {
		t.Fatalf("cosign sign: %v\n%s", err, out)
	}
	policy := func(key string) string {
		p := filepath.Join(t.TempDir(), "policy.json")
		doc := map[string]any{
			"default": []any{map[string]string{"type": "reject"}},
			"transports": map[string]any{"docker": map[string]any{
				reg.Ref("models"): []any{map[string]string{"type": "sigstoreSigned", "keyPath": filepath.Join(keys, key)}},
			}},
		}
		raw, _ := json.Marshal(doc)
		os.WriteFile(p, raw, 0o644)
		return p
	}
	// cosign v3 writes a bundle, which names the manifest digest only:
	// under the default signedIdentity it meets a pull by digest, never
	// one by tag.
	if r := ws(t, root, "verify-signature", "--plain-http", "--policy", policy("k1.pub"), ref2); r.code == 0 || !strings.Contains(r.errOut, "pull by digest") {
		t.Fatalf("verify-signature by tag of a bundle-signed artifact: exit %d\n%s", r.code, r.errOut)
	}
	got := wsOK(t, root, "verify-signature", "--plain-http", "--policy", policy("k1.pub"), "--json", pushed2)
	var verified []struct{ Scope, Type, Key, Signature string }
	if err := json.Unmarshal([]byte(got), &verified); err != nil || len(verified) != 1 || verified[0].Type != "sigstoreSigned" || verified[0].Scope != reg.Ref("models") {
		t.Fatalf("verify-signature of a cosign-signed artifact: %v\n%s", err, got)
	}
	bad := ws(t, root, "verify-signature", "--plain-http", "--policy", policy("k2.pub"), pushed2)
	if bad.code == 0 || !strings.Contains(bad.errOut, `scope "`+reg.Ref("models")+`"`) {
		t.Fatalf("another key: exit %d\n%s", bad.code, bad.errOut)
	}
	// weightsnap pull enforces it before publishing: into a new store, the
	// other key is refused naming the scope and nothing is published; the
	// right key pulls.
	fresh := filepath.Join(t.TempDir(), "store")
	if r := ws(t, fresh, "pull", "--plain-http", "--policy", policy("k2.pub"), pushed2); r.code == 0 || !strings.Contains(r.errOut, `scope "`+reg.Ref("models")+`"`) {
		t.Fatalf("pull with another key's policy: exit %d\n%s", r.code, r.errOut)
	}
	hex := strings.TrimPrefix(id, "sha256:")
	if ls := ws(t, fresh, "ls", "--json"); strings.Contains(ls.out, hex) {
		t.Fatalf("a refused pull published the artifact:\n%s", ls.out)
	}
	if got := strings.TrimSpace(wsOK(t, fresh, "pull", "--plain-http", "--policy", policy("k1.pub"), pushed2)); got != id {
		t.Fatalf("pull of the cosign-signed artifact printed %q, want %s", got, id)
	}
	if ls := wsOK(t, fresh, "ls", "--json"); !strings.Contains(ls, hex) {
		t.Fatalf("ls does not show the pulled artifact (so it cannot show a refused one):\n%s", ls)
	}
	// The unsigned copy in another repository under the same scope is refused.
	ref3 := reg.Ref("models/unsigned:v1")
	wsOK(t, root, "push", "--plain-http", id, ref3)
	if r := ws(t, root, "verify-signature", "--plain-http", "--policy", policy("k1.pub"), ref3); r.code == 0 || !strings.Contains(r.errOut, "no signature found") {
		t.Fatalf("unsigned: exit %d\n%s", r.code, r.errOut)
	}
}
