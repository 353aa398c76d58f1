package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
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
		ev, err := evict.New(d)
		if err != nil {
			t.Fatal(err)
		}
		s, err := control.Listen(context.Background(), sock, controlServices(noMounts{}, nil, rt, d, ev))
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

// linkReleaser lets go of the links outside the store that a weight
// snapshot would hold, as the snapshotter empties its weight snapshots.
type linkReleaser struct{ links map[artifact.ID]string }

func (r linkReleaser) Release(_ context.Context, id artifact.ID) error {
	if l, ok := r.links[id]; ok {
		return os.Remove(l)
	}
	return nil
}

// TestControlEviction: the daemon's use counts what its releaser lets go
// of, so an artifact a weight snapshot links frees its whole size; a dry
// run lists what the daemon would evict and evicts nothing; an eviction to
// a target evicts it, and names the pinned one it may not take.
func TestControlEviction(t *testing.T) {
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := evict.New(d)
	if err != nil {
		t.Fatal(err)
	}
	var linked, pinned artifact.ID
	rel := linkReleaser{links: map[artifact.ID]string{}}
	for i, id := range []*artifact.ID{&linked, &pinned} {
		src, identity := storetest.Model(t, 1<<20, uint64(40+i))
		if *id, err = storetest.Build(ctx, d, src, identity); err != nil {
			t.Fatal(err)
		}
	}
	l, err := d.Lookup(ctx, linked, "")
	if err != nil {
		t.Fatal(err)
	}
	rel.links[linked] = filepath.Join(t.TempDir(), "weight-snapshot-file")
	if err := os.Link(l.Files()[0].Abs, rel.links[linked]); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := d.Pin(ctx, pinned, store.Pin{By: store.PinByCLI, Reason: "golden"}); err != nil {
		t.Fatal(err)
	}
	ev.SetReleaser(rel)
	sock := filepath.Join(t.TempDir(), "c.sock")
	s, err := control.Listen(ctx, sock, controlServices(noMounts{}, nil, nil, d, ev))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := control.NewClient(sock)

	if si, err := c.Store(ctx); err != nil || si.Root != d.Root() {
		t.Fatalf("store: %+v %v", si, err)
	}
	var use []*store.ArtifactInfo
	if err := c.Use(ctx, &use); err != nil || len(use) != 2 {
		t.Fatalf("use: %+v %v", use, err)
	}
	for _, info := range use {
		if info.ID == linked && (info.Use == nil || info.Use.Frees != info.Use.Bytes || info.Use.Bytes < 1<<20) {
			t.Fatalf("use of the linked artifact %+v: want it to free its whole size", info.Use)
		}
	}
	zero := int64(0)
	for _, tc := range []struct {
		name   string
		dryRun bool
	}{
		{name: "dry run", dryRun: true},
		{name: "eviction", dryRun: false},
	} {
		var rep evict.Report
		if err := c.Evict(ctx, control.EvictRequest{To: &zero, DryRun: tc.dryRun}, &rep); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(rep.Evicted) != 1 || rep.Evicted[0].ID != linked || rep.Freed < 1<<20 || rep.DryRun != tc.dryRun ||
			len(rep.Held) != 1 || rep.Held[0].ID != pinned || !strings.Contains(rep.Held[0].Why, "golden") {
			t.Fatalf("%s: %+v", tc.name, rep)
		}
		_, err := d.InspectArtifact(ctx, linked)
		if tc.dryRun != (err == nil) {
			t.Fatalf("%s: the linked artifact stored %v", tc.name, err == nil)
		}
	}
	if _, err := os.Stat(rel.links[linked]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the releaser did not let go of the link: %v", err)
	}
}
