package snapshotter

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"github.com/weightsnap/weightsnap/control"
	"golang.org/x/sys/unix"
)

// A writable host mount (weightsnap mount --writable, for an engine's
// compile cache) is an overlay on the mount point: the view as its
// lowerdir, upper/ and work/ beside the view in the mount's home. A write
// copies the file up first, so the view's links, the store's very inodes,
// are never written; the unmount removes the home, and the writes with
// it.

// mountOverlay mounts the overlay of view with an upper and a work
// directory of home on dir.
func mountOverlay(home, view, dir string) error {
	upper, work := filepath.Join(home, "upper"), filepath.Join(home, "work")
	for _, p := range []string{view, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("a writable mount needs overlay options without ',', ':' or '\\': %s: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	for _, p := range []string{upper, work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", view, upper, work)
	if err := unix.Mount("weightsnap", dir, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay of %s on %s: %w", view, dir, err)
	}
	return nil
}

// shows says whether the mount point of mi shows its view: the view
// itself, bound there, or, writable, the overlay over it whose upper
// directory is the home's.
func shows(mi control.HostMountInfo, home string) bool {
	if !mi.Writable {
		return sameInode(mi.Dir, filepath.Join(home, "view"))
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mi.Dir))
	if err != nil || len(ms) == 0 {
		return false
	}
	top := ms[len(ms)-1]
	return top.FSType == "overlay" && strings.Contains(","+top.VFSOptions+",", ",upperdir="+filepath.Join(home, "upper")+",")
}
