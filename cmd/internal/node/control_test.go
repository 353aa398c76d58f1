package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
)

// noMounts are control host mounts that refuse every call.
type noMounts struct{}

func (noMounts) Mount(context.Context, control.HostMountRequest) (*control.HostMountInfo, error) {
	return nil, errdefs.ErrNotImplemented
}
func (noMounts) Unmount(context.Context, string) error { return errdefs.ErrNotImplemented }
func (noMounts) List() []control.HostMountInfo         { return nil }
func (noMounts) HoldersOf(artifact.ID) (*control.Holders, error) {
	return nil, errdefs.ErrNotImplemented
}

// TestControlPublish: POST /v1/publish publishes a compile cache through
// the daemon's runtime only when allow_post_load_publish is on; off, it is
// refused as a permission and the store does not get it; a request the
// route cannot read, or whose --for the store lacks, says its class.
func TestControlPublish(t *testing.T) {
	d, weights := storetest.Seeded(t, 64<<10, 1)
	forID, _ := weights.ID()
	cache := t.TempDir()
	if err := os.WriteFile(filepath.Join(cache, "kernel.bin"), []byte("compiled"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := control.PublishRequest{Kind: control.KindCompileCache, Dir: cache, For: forID, Engine: "standin", EngineVersion: "1", GPUArch: "none", TPSize: 1, PPSize: 1}
	client := func(allow bool) *control.Client {
		rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: d.Root(), AllowPostLoadPublish: allow})
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(t.TempDir(), "c.sock")
		s, err := control.Listen(context.Background(), sock, controlServices(noMounts{}, nil, rt))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return control.NewClient(sock)
	}
	ctx := context.Background()

	off := client(false)
	if _, err := off.Publish(ctx, req); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("publish with allow_post_load_publish off: %v, want permission denied", err)
	}
	dry := req
	dry.DryRun = true
	res, err := off.Publish(ctx, dry)
	if err != nil || res.Present || res.ID.IsZero() {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	if _, err := d.InspectArtifact(ctx, res.ID); err == nil {
		t.Fatal("a refused publication left the cache in the store")
	}

	on := client(true)
	got, err := on.Publish(ctx, req)
	if err != nil || got.ID != res.ID || !got.Present || len(got.Report) == 0 {
		t.Fatalf("publish: %+v %v", got, err)
	}
	if info, err := d.InspectArtifact(ctx, got.ID); err != nil || len(info.Files) != 1 || info.Files[0].Path != "kernel.bin" {
		t.Fatalf("the store holds %+v %v", info, err)
	}

	missing := req
	missing.For, _ = artifact.ParseIDHex("ff" + forID.Hex()[2:])
	relative := req
	relative.Dir = "cache"
	for name, tc := range map[string]struct {
		req   control.PublishRequest
		class error
	}{
		"for not in the store": {missing, errdefs.ErrNotFound},
		"no engine":            {control.PublishRequest{Kind: control.KindCompileCache, Dir: cache, For: forID, EngineVersion: "1", GPUArch: "none", TPSize: 1, PPSize: 1}, errdefs.ErrInvalidArgument},
		"unknown kind":         {control.PublishRequest{Kind: "weights", Dir: cache, For: forID}, errdefs.ErrInvalidArgument},
		"relative directory":   {relative, errdefs.ErrInvalidArgument},
	} {
		if _, err := on.Publish(ctx, tc.req); !errors.Is(err, tc.class) {
			t.Errorf("%s: %v, want %v", name, err, tc.class)
		}
	}
}
