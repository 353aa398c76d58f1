package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// signedPolicy writes a trust policy that requires a signature by key
// (a cosign public key file) for scope and accepts the rest unsigned,
// and a configuration file naming it; it returns both paths.
func signedPolicy(t *testing.T, scope, key string) (policy, config string) {
	t.Helper()
	dir := t.TempDir()
	policy, config = filepath.Join(dir, "policy.json"), filepath.Join(dir, "config.toml")
	raw, _ := json.Marshal(map[string]any{
		"default":    []any{map[string]string{"type": "insecureAcceptAnything"}},
		"transports": map[string]any{"docker": map[string]any{scope: []any{map[string]string{"type": "sigstoreSigned", "keyPath": key}}}},
	})
	writeJSON(t, policy, string(raw))
	writeJSON(t, config, fmt.Sprintf("[verify]\npolicy = %q\n", policy))
	return policy, config
}

// cosignSign signs ref (pinned) with the key file, offline.
func cosignSign(t *testing.T, keys, key, ref string) {
	t.Helper()
	if out, err := cosignRun(t, keys, "pw", "sign", "--yes", "--key", filepath.Join(keys, key), "--allow-http-registry", "--allow-insecure-registry",
		"--use-signing-config=false", "--tlog-upload=false", ref); err != nil {
		t.Fatalf("cosign sign %s: %v\n%s", ref, err, out)
	}
}

// cosignKeys generates the cosign key pairs prefix.key/prefix.pub
// (password "pw") in a new directory.
func cosignKeys(t *testing.T, prefixes ...string) string {
	t.Helper()
	keys := t.TempDir()
	for _, prefix := range prefixes {
		if out, err := cosignRun(t, keys, "pw", "generate-key-pair", "--output-key-prefix", prefix); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
	}
	return keys
}

// TestPeerFetchVerifiesOffline: node A pulls two
// artifacts signed by the real cosign CLI under a policy requiring that
// key, and serves its store; the registry is then stopped. Node B, with
// the same policy, resolves one of them from A: A's manifest carries the
// signatures its store kept, B verifies them offline and binds them to
// what it received, and records how; so does weightsnap peer fetch,
// under the scope of [resolve] registry. A that strips the signatures (its
// record gone), or swaps in the other artifact's, is refused, naming the
// scope, and the receiving store holds nothing.
func TestPeerFetchVerifiesOffline(t *testing.T) {
	harness.Peers(t).Cosign(t)
	keys := cosignKeys(t, "k1")
	reg := harness.StartRegistry(t)
	scope := reg.Ref("models/signed")
	policy, config := signedPolicy(t, scope, filepath.Join(keys, "k1.pub"))
	type signed struct{ id, ref, identity string }
	var arts []signed
	a := filepath.Join(t.TempDir(), "a")
	for i, size := range []string{"4MiB", "3MiB"} {
		_, root, id := ociCheckpoint(t, size, 1)
		ref := strings.TrimSpace(wsOK(t, root, "push", "--plain-http", id, reg.Ref(fmt.Sprintf("models/signed/x%d:v1", i))))
		cosignSign(t, keys, "k1.key", ref)
		if got := strings.TrimSpace(wsOK(t, a, "pull", "--plain-http", "--policy", policy, ref)); got != id {
			t.Fatalf("pull printed %q, want %s", got, id)
		}
		var info struct {
			Identity json.RawMessage `json:"identity"`
		}
		if err := json.Unmarshal([]byte(wsOK(t, a, "inspect", "--json", id)), &info); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "identity.json")
		writeJSON(t, file, string(info.Identity))
		arts = append(arts, signed{id, ref, file})
	}
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	serve := harness.StartProcess(t, harness.TempDir(t), "peer-serve", nil, weightsnapBin(t), "--root", a, "--config", "", "peer", "serve", "--listen", addr, "--allow-unauthenticated")
	if err := testenv.Wait(30*time.Second, func() error {
		if serve.Exited() {
			return testenv.Final(errors.New("peer serve exited"))
		}
		if r := ws(t, t.TempDir(), "peer", "ls", addr); r.code != 0 {
			return errors.New(r.errOut)
		}
		return nil
	}); err != nil {
		t.Fatalf("peer serve: %v\n%s", err, harness.Tail(serve.Log, 20))
	}
	reg.Proc.Kill() // from here on, the registry answers nothing
	x := arts[0]
	repo, _, _ := strings.Cut(x.ref, "@")

	// resolve resolves art on a new node B from A alone, the registry of
	// its identity tags down; it returns B's store and the run.
	resolveB := func() (string, wsResult) {
		b := filepath.Join(t.TempDir(), "b")
		return b, runWS(t, nil, []string{"--config", config, "--root", b, "resolve", "--identity", x.identity, "--mode", "required",
			"--peer", addr, "--registry", repo, "--allow-local-build=false", "--report", "-"})
	}
	// peer fetch names no reference: [resolve] registry's scope applies.
	fetchConfig := filepath.Join(t.TempDir(), "fetch.toml")
	writeJSON(t, fetchConfig, fmt.Sprintf("[verify]\npolicy = %q\n[resolve]\nregistry = %q\n", policy, repo))
	fetchB := func() (string, wsResult) {
		b := filepath.Join(t.TempDir(), "b")
		return b, runWS(t, nil, []string{"--config", fetchConfig, "--root", b, "peer", "fetch", addr, x.id})
	}
	for what, run := range map[string]func() (string, wsResult){"resolve": resolveB, "peer fetch": fetchB} {
		b, r := run()
		if r.code != 0 || (what == "resolve" && !strings.Contains(r.out, `"source": "peer"`)) {
			t.Fatalf("%s from the peer, the registry down: exit %d\n%s%s", what, r.code, r.out, r.errOut)
		}
		if out := wsOK(t, b, "inspect", x.id); !strings.Contains(out, "Verified:  verified\n  "+x.ref+"\n") {
			t.Fatalf("%s: B does not record how it verified the peer's artifact:\n%s", what, out)
		}
	}

	record := func(id string) string {
		return filepath.Join(a, "signatures", strings.TrimPrefix(id, "sha256:")+".json")
	}
	other, err := os.ReadFile(record(arts[1].id))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		hostile    func() error
	}{
		{"stripped", "carries no signature", func() error { return os.Remove(record(x.id)) }},
		{"swapped", "does not name identity", func() error { return os.WriteFile(record(x.id), other, 0o644) }},
	} {
		if err := tc.hostile(); err != nil {
			t.Fatal(err)
		}
		for what, run := range map[string]func() (string, wsResult){"resolve": resolveB, "peer fetch": fetchB} {
			b, r := run()
			all := r.out + r.errOut
			if r.code == 0 || !strings.Contains(all, scope) || !strings.Contains(all, "refuses it") || !strings.Contains(all, tc.want) ||
				(what == "resolve" && !strings.Contains(all, "unsigned")) {
				t.Fatalf("%s, %s signatures: exit %d, want a refusal naming scope %s and %q\n%s%s", what, tc.name, r.code, scope, tc.want, r.out, r.errOut)
			}
			if ls := ws(t, b, "ls", "--json"); strings.Contains(ls.out, strings.TrimPrefix(x.id, "sha256:")) {
				t.Fatalf("%s, %s signatures: the receiving store holds the artifact:\n%s", what, tc.name, ls.out)
			}
		}
	}
}
