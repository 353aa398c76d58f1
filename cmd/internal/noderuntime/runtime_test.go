package noderuntime

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/resolve"
)

// TestNewRuntime: the runtime takes its sources from the configuration,
// and in disabled mode it opens none of them.
func TestNewRuntime(t *testing.T) {
	cfg := config.Default()
	cfg.Root = filepath.Join(t.TempDir(), "root")
	cfg.Resolve.Registry = "Not A Reference"
	remote := cfg.Resolve.RegistryOptions("test")
	if _, err := NewRuntime(context.Background(), cfg, RuntimeOptions{Mode: resolve.Required, Remote: remote}); err == nil {
		t.Fatal("a bad [resolve] registry was not opened")
	}
	rt, err := NewRuntime(context.Background(), cfg, RuntimeOptions{Mode: resolve.Disabled, Remote: remote})
	if err != nil || rt.Mode() != resolve.Disabled {
		t.Fatalf("disabled runtime: %v", err)
	}
	cfg.Resolve.Registry, cfg.Resolve.Validation = "", "sometimes"
	if _, err := NewRuntime(context.Background(), cfg, RuntimeOptions{Mode: resolve.Required, Remote: remote}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("[resolve] validation not passed on: %v", err)
	}
}

// TestNewRuntimeUnderPolicy: a trust policy that requires signatures no
// longer stops resolution: the runtime is made, with the gate; a policy
// file that does not parse still stops it, as bad input.
func TestNewRuntimeUnderPolicy(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "root")
	cfg.Verify.Policy = filepath.Join(dir, "policy.json")
	pub := "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE3oRvmXXzAbV9S1iWwbvJGO0M0IUI\ncc2mB0y1FZx9xq7yCuJ0jdY5mJwvBQNXKf9NvdPKKkTgyg+PyqVCEmzD8A==\n-----END PUBLIC KEY-----\n"
	os.WriteFile(filepath.Join(dir, "k.pub"), []byte(pub), 0o644)
	os.WriteFile(cfg.Verify.Policy, []byte(`{"default": [{"type": "sigstoreSigned", "keyPath": "k.pub"}]}`), 0o644)
	remote := cfg.Resolve.RegistryOptions("test")
	if _, err := NewRuntime(context.Background(), cfg, RuntimeOptions{Mode: resolve.Required, Remote: remote}); err != nil {
		t.Fatalf("a policy requiring signatures: %v", err)
	}
	os.WriteFile(cfg.Verify.Policy, []byte(`{"default": [{"type": "sigstoreSigned"}]}`), 0o644)
	if _, err := NewRuntime(context.Background(), cfg, RuntimeOptions{Mode: resolve.Required, Remote: remote}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a bad policy: %v", err)
	}
}
