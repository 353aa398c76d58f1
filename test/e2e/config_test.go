package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestConfigPlainHTTP: with plain_http = true in the
// configuration file's [resolve] table and no --plain-http flag, weightsnap
// push, inspect, pull and mount (through weightsnapd) all reach a plain-HTTP
// registry; without the file the same push speaks HTTPS and fails.
func TestConfigPlainHTTP(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	d := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{Registries: []string{reg.Host}})
	ckpt, src, id := ociCheckpoint(t, "8MiB", 2)
	ref := reg.Ref("models/config:v1")

	if r := ws(t, src, "push", id, ref); r.code == 0 {
		t.Fatalf("push without the configuration file reached a plain-HTTP registry:\n%s", r.out)
	}
	run := func(args ...string) string {
		t.Helper()
		r := wsWith(t, d.Config, args...)
		if r.code != 0 {
			t.Fatalf("weightsnap %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.errOut)
		}
		return r.out
	}
	pushed := strings.TrimSpace(run("--root", src, "push", id, ref))
	if !strings.HasPrefix(pushed, reg.Ref("models/config@sha256:")) {
		t.Fatalf("push printed %q", pushed)
	}
	var info struct {
		Kind           string `json:"kind"`
		IdentityDigest string `json:"identity_digest"`
	}
	if err := json.Unmarshal([]byte(run("inspect", "--json", ref)), &info); err != nil || info.Kind != "weightsnap-artifact" || !strings.HasSuffix(info.IdentityDigest, id) {
		t.Fatalf("inspect: %v %+v", err, info)
	}
	var rep pullReport
	if err := json.Unmarshal([]byte(run("--root", filepath.Join(t.TempDir(), "store"), "pull", "--json", ref)), &rep); err != nil || !rep.Built || !strings.HasSuffix(rep.Identity, id) {
		t.Fatalf("pull: %v %+v", err, rep)
	}
	dir := filepath.Join(harness.TempDir(t), "models", "m")
	run("mount", ref, dir) // the daemon's store lacks it: weightsnapd pulls it
	sameFiles(t, ckpt, dir)
	run("umount", dir)
}
