package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestImportCommandBuildsOnceThenHits: the second import of an unchanged
// source is a hit on the same digest; a branch name is no revision.
func TestImportCommandBuildsOnceThenHits(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 2, DType: "F16", Seed: 9}); err != nil {
		t.Fatal(err)
	}
	storetest.Settle(t, src) // past the fingerprint cache's racy window
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, nil, 0o644)
	args := []string{"--root", filepath.Join(base, "root"), "--config", cfg, "import", src, "--revision", strings.Repeat("cd", 20), "--json"}
	var runs [2]importResult
	for i := range runs {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("import %d: %v", i, err)
		}
		if err := json.Unmarshal([]byte(out), &runs[i]); err != nil {
			t.Fatalf("import %d printed %q: %v", i, out, err)
		}
	}
	if !runs[0].Built || runs[1].Built || runs[0].ID != runs[1].ID {
		t.Fatalf("imports: %+v, want one build then a hit on the same digest", runs)
	}
	if out, err := runCLI(t, append(args[:4], "import", src, "--revision", "main")...); err == nil {
		t.Fatalf("a branch name was accepted as revision: %s", out)
	}
}

// TestExitCodes: docs/cli.md's exit-code table for bad input and a missing source.
func TestExitCodes(t *testing.T) {
	base := t.TempDir()
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, nil, 0o644)
	common := []string{"--root", filepath.Join(base, "root"), "--config", cfg}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"missing source", []string{"import", filepath.Join(base, "absent"), "--revision", strings.Repeat("cd", 20)}, 3},
		{"NaN size", []string{"dev", "synth", "--out", filepath.Join(base, "m"), "--size", "NaN"}, 2},
		{"huge chunk", []string{"pull", "--chunk-size", "1GiB", "127.0.0.1:1/x:y"}, 2},
		{"no such artifact", []string{"verify", strings.Repeat("ab", 32)}, 3},
		{"missing --revision", []string{"import", base}, 2},
		{"unknown flag", []string{"ls", "--bogus"}, 2},
		{"too many arguments", []string{"verify", "a", "b"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append(common, tc.args...)...)
			if got := exitcode.Of(err); err == nil || got != tc.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.code)
			}
		})
	}
}

func TestDaemonNotRunning(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "control.sock")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", filepath.Join(dir, "store"), sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"mount"}, {"umount", filepath.Join(dir, "m")}} {
		_, err := runCLI(t, append([]string{"--config", cfg}, args...)...)
		if err == nil || exitcode.Of(err) != exitcode.Busy {
			t.Fatalf("%v without weightsnapd: %v, want exit %d", args, err, exitcode.Busy)
		}
		for _, want := range []string{"weightsnapd does not answer", sock, "[snapshotter] control_address"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %q does not say %q", args, err, want)
			}
		}
	}
}

// TestCreatedDomainSaid: a command that writes (gc) on a root without a
// store creates one and says so, once.
func TestCreatedDomainSaid(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	for i, want := range []bool{true, false} {
		var out, errOut bytes.Buffer
		cmd := newRoot(&app{out: &out, errOut: &errOut})
		cmd.SetArgs([]string{"--config", "", "--root", root, "gc"})
		if err := exitcode.Execute(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(errOut.String(), "created a store domain at "+root+" (validation manifest_and_metadata")
		if said != want {
			t.Errorf("run %d: said %v, want %v: %q", i, said, want, errOut.String())
		}
	}
}

// TestFindingTheDaemon: the control socket comes from the file
// WEIGHTSNAP_CONFIG names when --config is not given, and --control-address
// overrides it (before or after the subcommand).
func TestFindingTheDaemon(t *testing.T) {
	dir := t.TempDir()
	fromEnv, fromFlag := filepath.Join(dir, "env.sock"), filepath.Join(dir, "flag.sock")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", filepath.Join(dir, "store"), fromEnv)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEIGHTSNAP_CONFIG", cfg)
	for _, tc := range []struct {
		args []string
		sock string
	}{
		{[]string{"mount"}, fromEnv},
		{[]string{"--control-address", fromFlag, "mount"}, fromFlag},
		{[]string{"mount", "--control-address", fromFlag}, fromFlag},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), "weightsnapd does not answer on its control socket "+tc.sock+" ") {
			t.Errorf("%v: %v, want weightsnapd not answering on %s", tc.args, err, tc.sock)
		}
	}
	t.Setenv("WEIGHTSNAP_CONFIG", filepath.Join(dir, "absent.toml"))
	if _, err := runCLI(t, "mount"); err == nil || exitcode.Of(err) != exitcode.BadInput || !strings.Contains(err.Error(), "absent.toml") {
		t.Errorf("WEIGHTSNAP_CONFIG naming a missing file: %v, want exit 2 naming it", err)
	}
}
