package evict_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// buildLockReleaser is a releaser that needs the build lock of the
// artifact being built before it lets go of the outside link: as
// containerd's garbage collection waits for the Prepare whose cold build
// makes the room. wait blocks for the lock until ctx ends; otherwise it
// only tries it. Either way it records a build that called it under its
// lock.
type buildLockReleaser struct {
	lock    string // the build lock of the artifact being built
	link    string // the outside link to let go of
	wait    bool
	underIt error // set when the build lock was held during a release
}

func (r *buildLockReleaser) Release(ctx context.Context, _ artifact.ID) error {
	f, err := os.OpenFile(r.lock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	how := unix.LOCK_EX | unix.LOCK_NB
	if r.wait {
		how = unix.LOCK_EX
	}
	got := make(chan error, 1)
	go func() { got <- unix.Flock(int(f.Fd()), how) }()
	select {
	case err = <-got:
	case <-ctx.Done():
		err = ctx.Err() // the flock ends once the build lets go of the lock
	}
	if err != nil {
		r.underIt = fmt.Errorf("the build lock was held during the release: %w", err)
		return r.underIt
	}
	return os.Remove(r.link)
}

// TestRoomIsMadeWithoutTheBuildLock: a build that lacks room asks for it
// with its build lock let go, so a releaser that needs that lock (as
// containerd's garbage collection needs the Prepare that runs the build)
// lets go of the outside link and the build goes on. Held during the
// release, the lock would leave the releaser waiting on the build and the
// build on the releaser until the context ends.
func TestRoomIsMadeWithoutTheBuildLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool
	}{
		{name: "the releaser waits for the build lock", wait: true},
		{name: "the releaser finds the build lock free", wait: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			policy := store.DefaultPolicy()
			policy.MaxStoreBytes = 2*mib + mib/2
			d, ev := open(t, t.TempDir(), policy)
			src, identity := storetest.Model(t, mib, 700)
			old, err := storetest.Build(ctx, d, src, identity)
			if err != nil {
				t.Fatal(err)
			}
			l, err := d.Lookup(ctx, old, "")
			if err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(t.TempDir(), "weight-snapshot")
			if err := os.Link(l.Files()[0].Abs, link); err != nil {
				t.Fatal(err)
			}
			l.Close()
			src, identity = storetest.Model(t, 2*mib, 701) // fits once the old one is gone
			id, err := identity.ID()
			if err != nil {
				t.Fatal(err)
			}
			r := &buildLockReleaser{lock: filepath.Join(d.Root(), "locks", id.Hex()+".build.lock"), link: link, wait: tc.wait}
			ev.SetReleaser(r)
			got, err := storetest.Build(ctx, d, src, identity)
			if r.underIt != nil {
				t.Fatal(r.underIt)
			}
			if err != nil || got != id {
				t.Fatalf("the build that needed the room: %v", err)
			}
			if present(d, old) || !present(d, id) {
				t.Fatalf("after the build: old present %v, new present %v", present(d, old), present(d, id))
			}
			if _, err := os.Stat(link); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the outside link stays: %v", err)
			}
		})
	}
}
