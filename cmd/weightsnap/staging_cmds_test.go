package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/staging"
	"github.com/weightsnap/weightsnap/staging/hubsynth"
	"github.com/weightsnap/weightsnap/trust"
)

// TestStageCommands drives a hub-mirror lane through the CLI: dry run,
// stage, stage locate (and resolve, its first name), resolution through the staged copy, force, ls,
// evict and publish.
func TestStageCommands(t *testing.T) {
	base := t.TempDir()
	model := filepath.Join(base, "model")
	if err := synth.Write(context.Background(), model, synth.Options{Size: 1 << 20, Shards: 2, DType: "BF16", Seed: 5}); err != nil {
		t.Fatal(err)
	}
	cache, commit := filepath.Join(base, "nas", "hub"), strings.Repeat("c", 40)
	if err := hubsynth.AddDir(cache, "org/m", commit, model); err != nil {
		t.Fatal(err)
	}
	storetest.Settle(t, cache) // past the fingerprint cache's racy window
	srcSnap := filepath.Join(cache, hubsynth.Folder("org/m"), "snapshots", commit)
	dst := filepath.Join(base, "local", "hub")
	dstSnap := filepath.Join(dst, hubsynth.Folder("org/m"), "snapshots", commit)
	recipe := filepath.Join(base, "recipe.toml")
	os.WriteFile(recipe, []byte(fmt.Sprintf("[[staging]]\nid = \"m\"\nkind = \"hub-mirror\"\nsrc = %q\ndst = %q\nemit_env = \"HF_HUB_CACHE\"\nmount = \"/hub\"\n", cache, dst)), 0o644)
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, nil, 0o644)
	ws := func(args ...string) (string, error) {
		return runCLI(t, append([]string{"--root", filepath.Join(base, "store"), "--config", cfg}, args...)...)
	}

	out, err := ws("stage", recipe, "--dry-run", "--json")
	var plan staging.Plan
	if err != nil || json.Unmarshal([]byte(out), &plan) != nil || plan.Lanes[0].CopyFiles != 5 || plan.Lanes[0].Links != 4 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("the dry run wrote the destination")
	}
	out, err = ws("stage", recipe, "--json")
	var rep stageResult
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Lanes[0].State != staging.StateStaged ||
		rep.Lanes[0].Env[0] != "HF_HUB_CACHE=/hub" || rep.Lanes[0].Mounts[1] != dst+":/hub:ro" {
		t.Fatalf("stage: %v\n%s", err, out)
	}
	for _, verb := range []string{"locate", "resolve"} {
		if out, err := ws("stage", verb, "org/m"); err != nil || out != dstSnap+"\n" {
			t.Fatalf("stage %s: %q %v", verb, out, err)
		}
	}

	// Corrupt a source blob (same size): resolution still builds the
	// artifact, so it read the staged copy; a force run re-verifies the
	// source and refuses it (exit 4).
	blob := resolveLink(t, filepath.Join(srcSnap, "model-00001-of-00002.safetensors"))
	good, _ := os.ReadFile(blob)
	bad := append([]byte{}, good...)
	bad[len(bad)-1] ^= 1
	os.WriteFile(blob, bad, 0o644)
	out, err = ws("resolve", "--from", srcSnap, "--revision", commit, "--repository", "org/m", "--report", "-")
	if err != nil || !strings.Contains(out, `"outcome": "`+string(resolve.OutcomeBuilt)+`"`) {
		t.Fatalf("resolve through the staged copy: %v\n%s", err, out)
	}
	if _, err = ws("stage", recipe, "--stage", "force"); exitcode.Of(err) != 4 || !strings.Contains(err.Error(), "repo org/m") {
		t.Fatalf("force over a corrupt source: %v (exit %d)", err, exitcode.Of(err))
	}
	if out, err := ws("stage", "locate", "org/m"); err != nil || out != srcSnap+"\n" {
		t.Fatalf("stage locate of a failed lane: %q %v, want the source", out, err)
	}
	os.WriteFile(blob, good, 0o644)

	out, err = ws("stage", recipe, "--publish", "--json")
	rep = stageResult{}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Published) != 1 || !strings.HasPrefix(rep.Published[0].ID.String(), "sha256:") {
		t.Fatalf("stage --publish: %v\n%s", err, out)
	}
	out, err = ws("staging", "ls", "--json")
	var lanes []staging.LaneStatus
	if err != nil || json.Unmarshal([]byte(out), &lanes) != nil || len(lanes) != 1 || lanes[0].State != staging.StateStaged || lanes[0].Bytes == 0 {
		t.Fatalf("staging ls: %v\n%s", err, out)
	}
	if out, err := ws("staging", "evict", "m"); err != nil || !strings.Contains(out, "evicted lane m") {
		t.Fatalf("staging evict: %q %v", out, err)
	}
	if _, err := os.Lstat(dstSnap); !os.IsNotExist(err) {
		t.Fatalf("evicted snapshot still there: %v", err)
	}

	// A bad recipe is exit 2 and names the key and line.
	os.WriteFile(recipe, []byte("[[staging]]\nid = \"m\"\nkind = \"hub-mirror\"\nsrc = \"/s\"\ndst = \"/d\"\nverify = \"fast\"\n"), 0o644)
	if _, err := ws("stage", recipe); exitcode.Of(err) != 2 || !strings.Contains(err.Error(), ":6: staging[0].verify") {
		t.Fatalf("bad recipe: %v", err)
	}
}

func resolveLink(t *testing.T, p string) string {
	t.Helper()
	target, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(p), target)
}

// TestStagePublishChecksModelSig: stage --publish checks a staged hub
// snapshot's model.sig the way import does, before publication, and
// keeps its record: under a policy that requires the key, a snapshot
// signed by it publishes and inspect shows it verified; one without a
// model.sig, or with a file the bundle does not name, is refused and the
// store holds nothing of it.
func TestStagePublishChecksModelSig(t *testing.T) {
	key, pub := testKey(t)
	commit := strings.Repeat("d", 40)
	for _, tc := range []struct {
		name        string
		signed      bool
		extra, want string // want "": published
	}{
		{"signed by the key", true, "", ""},
		{"no model.sig", false, "", "no model.sig"},
		{"an unsigned file", true, "notes.txt", "unsigned files: notes.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			model := filepath.Join(base, "model")
			if err := synth.Write(context.Background(), model, synth.Options{Size: 256 << 10, Shards: 1, DType: "BF16", Seed: 6}); err != nil {
				t.Fatal(err)
			}
			if tc.signed {
				os.WriteFile(filepath.Join(model, trust.OMSBundleFile), omsBundle(t, key, model), 0o644)
			}
			if tc.extra != "" {
				os.WriteFile(filepath.Join(model, tc.extra), []byte("added after signing"), 0o644)
			}
			cache, dst := filepath.Join(base, "nas", "hub"), filepath.Join(base, "local", "hub")
			if err := hubsynth.AddDir(cache, "org/m", commit, model); err != nil {
				t.Fatal(err)
			}
			storetest.Settle(t, cache)
			recipe := filepath.Join(base, "recipe.toml")
			os.WriteFile(recipe, []byte(fmt.Sprintf("[[staging]]\nid = \"m\"\nkind = \"hub-mirror\"\nsrc = %q\ndst = %q\n", cache, dst)), 0o644)
			cfg := policyConfig(t, base, "policy.json", `{"default": [{"type": "sigstoreSigned", "keyData": "`+base64.StdEncoding.EncodeToString(pub)+`"}]}`)
			ws := func(args ...string) (string, error) {
				return runCLI(t, append([]string{"--root", filepath.Join(base, "store"), "--config", cfg}, args...)...)
			}
			out, err := ws("stage", recipe, "--publish", "--json")
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `scope "default"`) {
					t.Fatalf("stage --publish: %v, want a refusal saying %q\n%s", err, tc.want, out)
				}
				if ls, _ := ws("ls", "--json"); strings.Contains(ls, "sha256:") {
					t.Fatalf("a refused snapshot was published:\n%s", ls)
				}
				return
			}
			var rep stageResult
			if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Published) != 1 || len(rep.Published[0].Verified) != 1 || rep.Published[0].Verified[0].Key == "" {
				t.Fatalf("stage --publish: %v\n%s", err, out)
			}
			out, err = ws("inspect", rep.Published[0].ID.String())
			if err != nil || !strings.Contains(out, "Verified:  verified\n  model.sig over the files (no repository)") {
				t.Fatalf("inspect: %v\n%s", err, out)
			}
		})
	}
}
