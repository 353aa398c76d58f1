package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/testenv"
)

var binaries struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// builtBinaries builds weightsnap and weightsnapd once for the package's
// tests and returns the directory holding them.
func builtBinaries(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = os.MkdirTemp("", "weightsnap-bin-")
		if binaries.err == nil {
			cmd := exec.Command("go", "build", "-o", binaries.dir+"/", ".", "../weightsnapd")
			binaries.out, binaries.err = cmd.CombinedOutput()
		}
	})
	if binaries.err != nil {
		t.Fatalf("go build: %v\n%s", binaries.err, binaries.out)
	}
	return binaries.dir
}

// runBinary runs one of the built programs and returns its exit status and
// what it wrote to stdout and stderr.
func runBinary(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(builtBinaries(t), name), args...)
	cmd.Env = append(os.Environ(), "WEIGHTSNAP_CONFIG=", "WEIGHTSNAP_ROOT=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("%s %v: %v", name, args, err)
	return 0, ""
}

// TestExitCodeTable walks docs/cli.md's exit-code table with the built
// programs: 2 bad input, 3 not found, 4 invalid data, 5 busy, out of space,
// unreachable or timed out, 6 refused by the trust policy. Each failure is
// said once.
func TestExitCodeTable(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty") // a root that holds no store
	root := filepath.Join(base, "root")
	if code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "store", "init"); code != 0 {
		t.Fatalf("store init: exit %d\n%s", code, out)
	}
	corrupt := filepath.Join(base, "corrupt")
	os.MkdirAll(corrupt, 0o755)
	os.WriteFile(filepath.Join(corrupt, "model.safetensors"), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"), 0o644)
	rev := strings.Repeat("ab", 20)
	down := testenv.ClosedAddr(t)
	refused, rejectAll := pushedArtifact(t, base, root, rev)
	pinned := pinnedStore(t, base)
	rejecting, identity, id := refusingConfig(t, base, root, rejectAll)
	missingPolicy := filepath.Join(base, "missing-policy.toml")
	os.WriteFile(missingPolicy, []byte("root = \""+root+"\"\n[verify]\npolicy = \""+filepath.Join(base, "absent-policy.json")+"\"\n"), 0o644)
	pinnedID := pinnedArtifact(t, base, root, rev)
	brokenPrefetch := filepath.Join(base, "prefetch")
	os.MkdirAll(brokenPrefetch, 0o755)
	os.WriteFile(filepath.Join(brokenPrefetch, "broken.toml"), []byte("[[artifact]\n"), 0o644)
	for _, tc := range []struct {
		name string
		prog string
		args []string
		code int
		says string
	}{
		{"unsupported filesystem", "weightsnap", []string{"--config", "", "--root", "/proc/self", "store", "init"}, 2, "only ext4, xfs, btrfs and tmpfs"},
		{"store root that cannot be created", "weightsnap", []string{"--config", "", "--root", "/proc/x", "store", "init"}, 2, "store root /proc/x cannot be created"},
		{"inspect with no argument", "weightsnap", []string{"--config", "", "--root", root, "inspect"}, 2, "inspect needs"},
		{"missing config file", "weightsnap", []string{"--config", filepath.Join(base, "absent.toml"), "ls"}, 2, "absent.toml"},
		{"weightsnapd: missing config file", "weightsnapd", []string{"--config", filepath.Join(base, "absent.toml")}, 2, "absent.toml"},
		{"weightsnapd config check: missing config file", "weightsnapd", []string{"--config", filepath.Join(base, "absent.toml"), "config", "check"}, 2, "absent.toml"},
		{"weightsnapd config check: missing policy file", "weightsnapd", []string{"--config", missingPolicy, "config", "check"}, 2, "[verify] policy: open " + filepath.Join(base, "absent-policy.json")},
		{"missing recipe", "weightsnap", []string{"--config", "", "--root", root, "stage", filepath.Join(base, "absent-recipe.toml")}, 2, "absent-recipe.toml"},
		{"unknown flag", "weightsnap", []string{"--config", "", "--root", root, "ls", "--bogus"}, 2, "bogus"},
		{"registry flag before the subcommand", "weightsnap", []string{"--config", "", "--root", root, "--plain-http", "pull", down + "/x:y"}, 2, "flag --plain-http belongs to the subcommand: weightsnap pull --plain-http"},
		{"ls on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "ls"}, 3, "no store"},
		{"inspect on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "inspect", "7a1b70"}, 3, "no store"},
		{"verify on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "verify", "7a1b70"}, 3, "no store"},
		{"no such artifact", "weightsnap", []string{"--config", "", "--root", root, "verify", strings.Repeat("ab", 32)}, 3, "not"},
		{"corrupt safetensors", "weightsnap", []string{"--config", "", "--root", root, "import", corrupt, "--revision", rev}, 4, "header past EOF"},
		{"resolve of a corrupt checkpoint", "weightsnap", []string{"--config", "", "--root", root, "resolve", "--from", corrupt, "--revision", rev}, 4, "header past EOF"},
		{"a single safetensors file", "weightsnap", []string{"--config", "", "--root", empty, "import", filepath.Join(corrupt, "model.safetensors"), "--revision", rev}, 2, "import takes a checkpoint directory"},
		{"a missing checkpoint directory", "weightsnap", []string{"--config", "", "--root", empty, "import", filepath.Join(base, "absent-model"), "--revision", rev}, 3, "no such checkpoint directory"},
		{"unpin on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "unpin", "7a1b70"}, 3, "no store"},
		{"pin of an ID on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "pin", "7a1b70"}, 3, "no store"},
		{"rm on a root without a store", "weightsnap", []string{"--config", "", "--root", empty, "rm", "7a1b70"}, 3, "no store"},
		{"a prefetch file that cannot be parsed", "weightsnap", []string{"--config", "", "--root", root, "prefetch", "sync", "--timeout", "5s", brokenPrefetch}, 2, "broken.toml cannot be parsed"},
		{"a bad size", "weightsnap", []string{"--config", "", "--root", root, "verify", "--all", "--rate", "fast"}, 2, "--rate"},
		{"rm of a pinned artifact", "weightsnap", []string{"--config", "", "--root", root, "rm", pinnedID}, 5, "is pinned by cli"},
		{"peer down", "weightsnap", []string{"--config", "", "peer", "ls", down}, 5, "connection refused"},
		{"weightsnapd down", "weightsnap", []string{"--config", "", "--control-address", filepath.Join(base, "absent.sock"), "prefetch", "ls"}, 5, "weightsnapd does not answer"},
		{"registry down on push", "weightsnap", []string{"--config", "", "--root", root, "push", "--plain-http", pinnedID, down + "/x:y"}, 5, "connection refused"},
		{"eviction target held by a pin", "weightsnap", []string{"--config", "", "--root", pinned, "gc", "--evict", "--to", "0"}, 5, "pinned by cli"},
		{"registry down", "weightsnap", []string{"--config", "", "--root", root, "pull", "--plain-http", down + "/x:y"}, 5, "connection refused"},
		{"refused by the trust policy", "weightsnap", []string{"--config", "", "--root", filepath.Join(base, "other"), "pull", "--plain-http", "--policy", rejectAll, refused}, 6, "refuses it"},
		{"resolve of a store hit the trust policy refuses", "weightsnap", []string{"--config", rejecting, "resolve", "--identity", identity}, 6, "the store holds it unverified"},
		{"peer fetch of a store hit the trust policy refuses", "weightsnap", []string{"--config", rejecting, "peer", "fetch", down, id}, 6, "the store holds it unverified"},
		{"pin of a reference the trust policy refuses", "weightsnap", []string{"--config", rejecting, "pin", "--plain-http", refused}, 6, "refuses it"},
		{"image build over weights the trust policy refuses", "weightsnap", []string{"--config", rejecting, "image", "build", "--plain-http", "--weights", refused, "--at", "/models/x", "-t", refused + "-image"}, 6, "refuses it"},
		{"import the trust policy refuses", "weightsnap", []string{"--config", rejecting, "import", filepath.Join(base, "model"), "--revision", strings.Repeat("cd", 20)}, 6, "no model.sig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, tc.prog, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.says) || strings.Contains(out, "file exists") {
				t.Errorf("%s %v: exit %d, want %d saying %q:\n%s", tc.prog, tc.args, code, tc.code, tc.says, out)
			}
			// The failure is said once: no log line repeats it.
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "level=") && strings.Contains(line, tc.says) {
					t.Errorf("%s %v: a log line repeats the failure:\n%s", tc.prog, tc.args, out)
				}
			}
		})
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only commands created %s (%v)", empty, err)
	}
}

// TestPlainHTTPFlagHosts: --plain-http=HOST talks plain HTTP to that
// registry alone; bare --plain-http to every one.
func TestPlainHTTPFlagHosts(t *testing.T) {
	down := testenv.ClosedAddr(t)
	common := []string{"--config", "", "--root", t.TempDir(), "pull"}
	for _, tc := range []struct {
		flag, scheme string
	}{
		{"--plain-http=" + down, "http://"},
		{"--plain-http=127.0.0.1:1,localhost:5000", "https://"},
		{"--plain-http", "http://"},
		{"--plain-http=false", "https://"},
	} {
		_, err := runCLI(t, append(common, tc.flag, down+"/x:y")...)
		if err == nil || !strings.Contains(err.Error(), `"`+tc.scheme+down+"/v2/") {
			t.Errorf("%s: %v, want a request to %s%s", tc.flag, err, tc.scheme, down)
		}
	}
}

// pinnedArtifact imports a small checkpoint of its own into root, pins it
// and returns its ID.
func pinnedArtifact(t *testing.T, base, root, rev string) string {
	t.Helper()
	src := filepath.Join(base, "pinned-model")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 64 << 10, Shards: 1, DType: "F16", Seed: 2}); err != nil {
		t.Fatal(err)
	}
	code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "import", src, "--revision", rev)
	if code != 0 {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	if code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "pin", id); code != 0 {
		t.Fatalf("pin: exit %d\n%s", code, out)
	}
	return id
}

// pushedArtifact imports a small checkpoint into root, pushes it to an
// in-process registry, and returns its reference and a trust policy
// that rejects everything.
func pushedArtifact(t *testing.T, base, root, rev string) (ref, rejectAll string) {
	t.Helper()
	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	src := filepath.Join(base, "model")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 64 << 10, Shards: 1, DType: "F16", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "import", src, "--revision", rev)
	if code != 0 {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	ref = strings.TrimPrefix(reg.URL, "http://") + "/models/x:v1"
	if code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "push", "--plain-http", id, ref); code != 0 {
		t.Fatalf("push: exit %d\n%s", code, out)
	}
	rejectAll = filepath.Join(base, "reject.json")
	if err := os.WriteFile(rejectAll, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return ref, rejectAll
}

// refusingConfig writes a configuration file of the store at root whose
// trust policy is policy, and the identity document of root's one
// artifact; it returns the file, the document and the artifact's ID.
func refusingConfig(t *testing.T, base, root, policy string) (config, identity, id string) {
	t.Helper()
	code, out := runBinary(t, "weightsnap", "--config", "", "--root", root, "ls", "--json")
	if code != 0 {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	var ls []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ls: %v, want one artifact:\n%s", err, out)
	}
	code, out = runBinary(t, "weightsnap", "--config", "", "--root", root, "inspect", "--json", ls[0].ID)
	var info struct {
		Identity json.RawMessage `json:"identity"`
	}
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || len(info.Identity) == 0 {
		t.Fatalf("inspect: exit %d, %v:\n%s", code, err, out)
	}
	config, identity = filepath.Join(base, "rejecting.toml"), filepath.Join(base, "identity.json")
	toml := fmt.Sprintf("root = %q\n\n[verify]\npolicy = %q\n", root, policy)
	if err := os.WriteFile(config, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(identity, info.Identity, 0o644); err != nil {
		t.Fatal(err)
	}
	return config, identity, ls[0].ID
}
