package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
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

// TestConfigStoreApplied: changing [store] limits and watermarks in the
// configuration file and restarting weightsnapd changes what the store
// enforces. The daemon's log names each change, inspect --domain shows the
// new policy, the new watermarks make the daemon evict at its start, and
// the new max_store_bytes (a size with a unit) makes an import evict.
func TestConfigStoreApplied(t *testing.T) {
	before := "max_store_bytes = \"1GiB\"\nhigh_watermark_percent = 0\nlow_watermark_percent = 75\n"
	after := "max_store_bytes = \"60MiB\"\nhigh_watermark_percent = 30\nlow_watermark_percent = 20\n"
	d := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{StoreTmpfs: "256m", Store: before})
	base := t.TempDir()
	importModel := func(i int) (string, wsResult) {
		dir := filepath.Join(base, fmt.Sprint("m", i))
		if r := wsWith(t, d.Config, "dev", "synth", "--out", dir, "--size", "40MiB", "--shards", "2", "--seed", fmt.Sprint(490+i)); r.code != 0 {
			t.Fatalf("synth: exit %d\n%s", r.code, r.errOut)
		}
		r := wsWith(t, d.Config, "import", dir, "--revision", storetest.Revision, "--repository", fmt.Sprint("org/m", i))
		return strings.TrimPrefix(strings.TrimSpace(r.out), "sha256:"), r
	}
	var ids []string
	for i := range 3 { // 120 MiB: 47% of the store's filesystem, within the first limits
		id, r := importModel(i)
		if r.code != 0 {
			t.Fatalf("import of model %d: exit %d\n%s%s", i, r.code, r.out, r.errOut)
		}
		ids = append(ids, id)
	}
	if n := len(storedIDs(t, d)); n != 3 {
		t.Fatalf("the store holds %d models under the first limits, want 3", n)
	}

	raw, err := os.ReadFile(d.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Config, []byte(strings.Replace(string(raw), before, after, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Restart(t)

	logged, err := os.ReadFile(d.Proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range [][]string{
		{`"field":"max_store_bytes"`, `"old":"1.0 GiB"`, `"new":"60.0 MiB"`},
		{`"field":"high_watermark_percent"`, `"old":"0"`, `"new":"30"`},
		{`"field":"low_watermark_percent"`, `"old":"75"`, `"new":"20"`},
	} {
		if !slices.ContainsFunc(strings.Split(string(logged), "\n"), func(line string) bool {
			return strings.Contains(line, "store policy changed by the configuration file") && containsAll(line, change...)
		}) {
			t.Errorf("the daemon's log has no line with %v:\n%s", change, harness.Tail(d.Proc.Log, 40))
		}
	}
	var rep struct {
		Policy struct {
			MaxStoreBytes int64 `json:"max_store_bytes"`
			High          int   `json:"high_watermark_percent"`
			Low           int   `json:"low_watermark_percent"`
		} `json:"policy"`
	}
	r := wsWith(t, d.Config, "inspect", "--domain", "--json")
	if err := json.Unmarshal([]byte(r.out), &rep); r.code != 0 || err != nil || rep.Policy.MaxStoreBytes != 60<<20 || rep.Policy.High != 30 || rep.Policy.Low != 20 {
		t.Fatalf("inspect --domain: exit %d, %v, %+v\n%s%s", r.code, err, rep.Policy, r.out, r.errOut)
	}
	r = wsWith(t, d.Config, "inspect", "--domain")
	if !strings.Contains(r.out, "max store 60.0 MiB") || !strings.Contains(r.out, "high watermark 30%") {
		t.Errorf("inspect --domain does not show the new policy:\n%s", r.out)
	}

	// Past the new high watermark, the daemon evicts the least recently
	// used down to the low one (51 MiB): the newest model stays.
	deadline := time.Now().Add(time.Minute)
	for len(storedIDs(t, d)) > 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if stored := storedIDs(t, d); len(stored) != 1 || stored[ids[2]] == 0 {
		t.Fatalf("after the restart the store holds %v, want only the newest model %s\n%s", stored, ids[2], harness.Tail(d.Proc.Log, 40))
	}
	// A fourth model does not fit beside it under 60 MiB: its import evicts it.
	id, r := importModel(3)
	if r.code != 0 {
		t.Fatalf("import under the new max_store_bytes: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if stored := storedIDs(t, d); len(stored) != 1 || stored[id] == 0 {
		t.Fatalf("after the import the store holds %v, want only %s", stored, id)
	}
}

// containsAll says whether s holds every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
