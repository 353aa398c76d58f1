package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

// TestPrecedence: every setting with more than one source takes the flag,
// then the environment, then the file, then the default. A [store] key
// the file leaves out keeps the store's recorded value.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("root = \"/file/root\"\n[snapshotter]\ncontrol_address = \"/file/control.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare.toml")
	if err := os.WriteFile(bare, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		got  func(*app) string
		want string
	}{
		{"root: flag", map[string]string{config.EnvRoot: "/env/root"}, []string{"--config", file, "--root", "/flag/root"}, (*app).effectiveRoot, "/flag/root"},
		{"root: environment", map[string]string{config.EnvRoot: "/env/root"}, []string{"--config", file}, (*app).effectiveRoot, "/env/root"},
		{"root: file", nil, []string{"--config", file}, (*app).effectiveRoot, "/file/root"},
		{"root: default", nil, []string{"--config", bare}, (*app).effectiveRoot, config.DefaultRoot()},
		{"config: flag", map[string]string{config.EnvPath: file}, []string{"--config", bare}, func(a *app) string { return a.configPath }, bare},
		{"config: environment", map[string]string{config.EnvPath: file}, nil, func(a *app) string { return a.configPath }, file},
		{"config: default", nil, nil, func(a *app) string { return a.configPath }, config.DefaultPath},
		{"control address: flag", nil, []string{"--config", file, "--control-address", "/flag/control.sock"}, controlAddress, "/flag/control.sock"},
		{"control address: file", nil, []string{"--config", file}, controlAddress, "/file/control.sock"},
		{"control address: default", nil, []string{"--config", bare}, controlAddress, def.Snapshotter.ControlAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(config.EnvRoot, "")
			t.Setenv(config.EnvPath, "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			a := &app{out: io.Discard, errOut: io.Discard}
			cmd := newRoot(a)
			cmd.SetArgs(append(tc.args, "version"))
			cmd.SetOut(io.Discard)
			if err := exitcode.Execute(context.Background(), cmd); err != nil {
				t.Fatal(err)
			}
			if got := tc.got(a); got != tc.want {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func controlAddress(a *app) string { return a.cfg.Snapshotter.ControlAddress }

// TestStorePolicyPrecedence: each [store] field is store init's flag, then
// the file's key, then the store's recorded value, then the default, as
// the next open records it.
func TestStorePolicyPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		file     string   // [store] keys
		initArgs []string // store init's flags before the file is written
		flags    []string // store init's flags once it is
		want     bytefmt.Size
	}{
		{"flag over file", "max_store_bytes = \"1GiB\"", nil, []string{"--max-store-bytes", "2GiB"}, 2 << 30},
		{"file over the store's record", "max_store_bytes = \"1GiB\"", []string{"--max-store-bytes", "3GiB"}, nil, 1 << 30},
		{"the store's record without the key", "min_free_bytes = \"1MiB\"", []string{"--max-store-bytes", "3GiB"}, nil, 3 << 30},
		{"default", "", nil, nil, store.DefaultPolicy().MaxStoreBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(config.EnvRoot, "")
			dir := t.TempDir()
			root, file := filepath.Join(dir, "root"), filepath.Join(dir, "config.toml")
			if _, err := runCLI(t, append([]string{"--config", "", "--root", root, "store", "init"}, tc.initArgs...)...); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte("[store]\n"+tc.file+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := runCLI(t, append([]string{"--config", file, "--root", root, "store", "init"}, tc.flags...)...); err != nil {
				t.Fatal(err)
			}
			p, err := store.ReadPolicy(root)
			if err != nil || p.MaxStoreBytes != tc.want {
				t.Fatalf("max_store_bytes %v, %v; want %v", p.MaxStoreBytes, err, tc.want)
			}
		})
	}
}

// TestStoreInitFlags: store init has a flag for every field of the store's
// policy, each recorded in domain-policy.json with units for sizes.
func TestStoreInitFlags(t *testing.T) {
	var keys []string
	for _, pf := range policyFlags {
		keys = append(keys, pf.key)
	}
	if strings.Join(keys, " ") != strings.Join(store.PolicyKeys(), " ") {
		t.Fatalf("store init's flags set %v, the policy has %v", keys, store.PolicyKeys())
	}
	t.Setenv(config.EnvRoot, "")
	root := filepath.Join(t.TempDir(), "root")
	if _, err := runCLI(t, "--config", "", "--root", root, "store", "init",
		"--validation", "full_checksum", "--max-artifact-bytes", "100MiB", "--max-store-bytes", "1.5GiB", "--min-free-bytes", "4096",
		"--coordination-timeout", "30", "--quarantine-max-age", "60", "--stale-build-seconds", "90",
		"--eviction", "off", "--high-watermark-percent", "70", "--low-watermark-percent", "50"); err != nil {
		t.Fatal(err)
	}
	want := store.Policy{Validation: store.FullChecksum, MaxArtifactBytes: 100 << 20, MaxStoreBytes: 3 << 29, MinFreeBytes: 4096,
		CoordinationTimeoutSeconds: 30, QuarantineMaxAgeSeconds: 60, StaleBuildSeconds: 90, Eviction: "off", HighWatermarkPercent: 70, LowWatermarkPercent: 50}
	if p, err := store.ReadPolicy(root); err != nil || p != want {
		t.Fatalf("recorded %+v, %v; want %+v", p, err, want)
	}
	for _, bad := range [][]string{{"--max-store-bytes", "lots"}, {"--low-watermark-percent", "90"}, {"--eviction", "fifo"}} {
		_, err := runCLI(t, append([]string{"--config", "", "--root", root, "store", "init"}, bad...)...)
		if exitcode.Of(err) != exitcode.BadInput {
			t.Errorf("store init %v: %v, want exit %d", bad, err, exitcode.BadInput)
		}
	}
	if p, err := store.ReadPolicy(root); err != nil || p != want {
		t.Fatalf("refused flags recorded %+v, %v; want %+v", p, err, want)
	}
}
