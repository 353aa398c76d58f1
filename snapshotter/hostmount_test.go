package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"golang.org/x/sys/unix"
)

// TestHostMount: a host mount is a read-only bind of the artifact's view,
// leased (the store refuses to remove it) until it is unmounted; it is
// taken again after a restart while it is mounted, and forgotten when it
// was unmounted behind the daemon's back. Everything goes through the
// control API, as the CLI does.
func TestHostMount(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 30)
	aid := artifact.MustParseID(id)
	sock := filepath.Join(t.TempDir(), "control.sock")
	var srv *control.Server
	serve := func() *control.Client {
		var err error
		if srv, err = control.Listen(ctx, sock, control.Services{Mounts: n.sn.HostMounts()}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return control.NewClient(sock)
	}
	c := serve()
	dir := filepath.Join(t.TempDir(), "models", "m") // made by the mount
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })

	mi, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(id), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if mi.Dir != dir || mi.ID.String() != id || !mi.Leased {
		t.Fatalf("mount %+v", mi)
	}
	l, err := n.dom.Lookup(ctx, aid, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Files() {
		if !isStoreInode(t, filepath.Join(dir, f.Path), f.File) {
			t.Fatalf("%s is not the store's inode", f.Path)
		}
	}
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write into the mount: %v, want EROFS", err)
	}
	busy := func() {
		t.Helper()
		if err := n.dom.Remove(ctx, aid); !errdefs.IsFailedPrecondition(err) {
			t.Fatalf("remove of a mounted artifact: %v, want busy", err)
		}
	}
	busy()
	if h, err := c.Holders(ctx, artifact.MustParseID(id)); err != nil || !h.Leased || !slices.Equal(h.Mounts, []string{dir}) {
		t.Fatalf("holders %+v %v", h, err)
	}
	if _, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(id), Dir: dir}); !errdefs.IsFailedPrecondition(err) || repeatsClass(err) {
		t.Fatalf("a second mount on %s: %v, want refused as busy", dir, err)
	}

	// Refused requests, with their classes through the API.
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "f"), nil, 0o644)
	for _, tc := range []struct {
		name string
		req  control.HostMountRequest
		is   func(error) bool
	}{
		{"relative dir", control.HostMountRequest{ID: artifact.MustParseID(id), Dir: "models"}, errdefs.IsInvalidArgument},
		{"a directory with files", control.HostMountRequest{ID: artifact.MustParseID(id), Dir: full}, errdefs.IsInvalidArgument},
		{"a file", control.HostMountRequest{ID: artifact.MustParseID(id), Dir: "/proc/self/status"}, errdefs.IsInvalidArgument},
		{"inside the store", control.HostMountRequest{ID: artifact.MustParseID(id), Dir: filepath.Join(n.dom.Root(), "x")}, errdefs.IsInvalidArgument},
		{"no identity", control.HostMountRequest{Dir: t.TempDir()}, errdefs.IsInvalidArgument},
		{"tag reference", control.HostMountRequest{ID: artifact.MustParseID(id), Artifact: "reg.example/m:v1", Dir: t.TempDir()}, errdefs.IsInvalidArgument},
		{"missing artifact", control.HostMountRequest{ID: artifact.MustParseID("sha256:" + strings.Repeat("5", 64)), Dir: t.TempDir()}, errdefs.IsNotFound},
	} {
		if _, err := c.HostMount(ctx, tc.req); !tc.is(err) || repeatsClass(err) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := c.HostUnmount(ctx, t.TempDir()); !errdefs.IsNotFound(err) {
		t.Fatalf("unmount of a directory that is no host mount: %v", err)
	}

	// A restart takes the mount's lease again (from the store).
	srv.Close()
	n.sn.Close()
	n.open(t)
	c = serve()
	if ms, err := c.Mounts(ctx); err != nil || len(ms) != 1 || ms[0].Dir != dir || !ms[0].Leased {
		t.Fatalf("mounts after a restart %+v %v", ms, err)
	}
	busy()
	if got := testutil.ToFloat64(n.metrics.hostMounts); got != 1 {
		t.Fatalf("host_mounts %v", got)
	}

	// A process with a file open there keeps the mount, named in the refusal.
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(files) == 0 {
		t.Fatalf("no weight file in %s", dir)
	}
	held, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.HostUnmount(ctx, dir); !errdefs.IsFailedPrecondition(err) || repeatsClass(err) ||
		!strings.Contains(err.Error(), fmt.Sprintf("in use by pid %d (", os.Getpid())) {
		t.Fatalf("unmount of a mount in use: %v, want refused naming pid %d", err, os.Getpid())
	}
	held.Close()
	if err := c.HostUnmount(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(raw), " "+dir+" ") {
		t.Fatal("still mounted")
	}
	if _, err := os.Stat(n.sn.mounts.home(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mount's record and view are left: %v", err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the unmount: %v", got)
	}

	// A mount undone behind the daemon's back is forgotten at the next start.
	if _, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(id), Dir: dir}); err != nil {
		t.Fatal(err)
	}
	n.sn.Close()
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	n.open(t)
	if ms := n.sn.HostMounts().List(); len(ms) != 0 || len(n.sn.leases.identities()) != 0 {
		t.Fatalf("mounts %+v, leases %v after the mount went", ms, n.sn.leases.identities())
	}
	if err := n.dom.Remove(ctx, aid); err != nil {
		t.Fatal(err)
	}
}

// repeatsClass reports whether err's message names its class twice in a
// row ("failed precondition: failed precondition"), as a message that went
// through the control API did when the daemon's already named it.
func repeatsClass(err error) bool {
	for _, cls := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrFailedPrecondition,
		errdefs.ErrUnavailable, errdefs.ErrDataLoss, errdefs.ErrResourceExhausted, errdefs.ErrInternal} {
		if strings.Contains(err.Error(), cls.Error()+": "+cls.Error()) {
			return true
		}
	}
	return false
}
