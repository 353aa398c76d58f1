package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestMountLayoutFlags: a layout or repo id the daemon would refuse is
// refused by the CLI as bad input, before it asks the daemon; one it
// accepts (the repo id given, or the artifact's repository) gets as far as
// the daemon (which does not answer here).
func TestMountLayoutFlags(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := filepath.Join(dir, "store")
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, repo := range []string{storetest.Repository, ""} {
		_, src := storetest.Checkpoint(t, 128<<10, 1+len(ids))
		l, _, err := d.GetOrBuild(ctx, artifact.PassthroughIdentity(src, repo, storetest.Revision, "", 0, 0), &artifact.Passthrough{Src: src})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.ID.Hex())
		l.Close()
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", root, filepath.Join(dir, "control.sock"))), 0o644); err != nil {
		t.Fatal(err)
	}
	hub := filepath.Join(dir, "hub")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"two slashes", []string{"--layout", "hf", "--repo", "a/b/c", ids[0], hub}, exitcode.BadInput, `"a/b/c"`},
		{"dot-dot", []string{"--layout", "hf", "--repo", "../etc", ids[0], hub}, exitcode.BadInput, `"../etc"`},
		{"unknown layout", []string{"--layout", "diffusers", ids[0], hub}, exitcode.BadInput, `"diffusers"`},
		{"repo without layout", []string{"--repo", "org/x", ids[0], hub}, exitcode.BadInput, "without layout hf"},
		{"no repository", []string{"--layout", "hf", ids[1], hub}, exitcode.BadInput, "--repo ORG/NAME"},
		{"the artifact's repository", []string{"--layout", "hf", ids[0], hub}, exitcode.Busy, "weightsnapd does not answer"},
		{"a repo given", []string{"--layout", "hf", "--repo", "gpt2", ids[1], hub}, exitcode.Busy, "weightsnapd does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append([]string{"--config", cfg, "mount"}, tc.args...)...)
			if err == nil || exitcode.Of(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("exit %d (%v), want %d saying %s", exitcode.Of(err), err, tc.code, tc.says)
			}
		})
	}
	_, err = runCLI(t, "--config", cfg, "image", "build", "--layout", "hf", "--weights", "127.0.0.1:1/m:a", "--at", "/hub",
		"--weights", "127.0.0.1:1/m:b", "--at", "/hub", "--repo", "org/a", "-t", "127.0.0.1:1/img:v1")
	if exitcode.Of(err) != exitcode.BadInput || !strings.Contains(err.Error(), "one --repo per --weights") {
		t.Fatalf("image build with fewer --repo than --weights: %v", err)
	}
}
