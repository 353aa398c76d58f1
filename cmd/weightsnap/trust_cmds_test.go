package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
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
	_, err = runCLI(t, "--config", "", "verify-policy", bad)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("want bad input at line 3, got %v", err)
	}
}
