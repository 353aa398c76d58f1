package noderuntime

import (
	"context"
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
