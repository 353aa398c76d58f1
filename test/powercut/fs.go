package powercut

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// stepPrefix starts the names whose lookup in the root announces a store
// fault point (see store's WEIGHTSNAP_FAULT_TRACE).
const stepPrefix = ".powercut-step."

// Options say when the power fails.
type Options struct {
	CutAfterSync int    // cut right after the k-th sync call (0: not at a sync)
	CutAtStep    string // cut when a process passes this fault point: NAME or NAME@N (the N-th pass)
	// Seed, when nonzero, persists a random subset of what was not durable at the cut.
	Seed uint64
}

// FS is one mounted power-cut filesystem.
type FS struct {
	mount, backing string
	opts           Options
	server         *fuse.Server
	conn           uint32 // the FUSE connection's number: the minor of the mount's device

	mu      sync.Mutex
	m       *model
	rootIno uint64 // the backing root's inode number
	syncs   int
	passes  map[string]int // fault point -> passes so far
	steps   []string       // the fault points passed, as NAME@N
	log     []string
	image   *Image // set at the cut

	cut         chan struct{} // closed at the cut
	release     chan struct{} // closed to fail the requests held at the cut
	releaseOnce sync.Once
}

// Mount serves the tree at backing, taken as fully durable, on mountpoint.
func Mount(mountpoint, backing string, opts Options) (*FS, error) {
	f := &FS{mount: mountpoint, backing: backing, opts: opts, m: newModel(), passes: map[string]int{},
		cut: make(chan struct{}), release: make(chan struct{})}
	if err := f.m.load(backing); err != nil {
		return nil, fmt.Errorf("powercut: load %s: %w", backing, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(backing, &st); err != nil {
		return nil, err
	}
	f.rootIno = st.Ino
	lb, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	root := &node{LoopbackNode: lb.(*fs.LoopbackNode), pc: f}
	zero, second := time.Duration(0), time.Second
	f.server, err = fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &second, AttrTimeout: &second, NegativeTimeout: &zero, // every step lookup arrives
		// Mounted as type fuse.powercut, which a store built with the "powercut" tag admits.
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "powercut", Name: "powercut", DisableXAttrs: true},
	})
	if err != nil {
		return nil, fmt.Errorf("powercut: mount %s: %w", mountpoint, err)
	}
	closeFUSEOnExec()
	var mst unix.Stat_t
	if err := unix.Stat(mountpoint, &mst); err != nil {
		f.server.Unmount()
		return nil, err
	}
	f.conn = unix.Minor(mst.Dev)
	return f, nil
}

// closeFUSEOnExec marks this process's /dev/fuse descriptors close-on-exec:
// go-fuse's direct mount opens the device without it, and a child that
// inherited it would keep the connection alive, so a request held at a cut
// would never end once the server is gone.
func closeFUSEOnExec() {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
}

// TracePrefix is what a store built with the "faults" tag needs in
// WEIGHTSNAP_FAULT_TRACE to announce its fault points to this filesystem.
func (f *FS) TracePrefix() string { return filepath.Join(f.mount, stepPrefix) }

// Cut is closed when the power is cut.
func (f *FS) Cut() <-chan struct{} { return f.cut }

// Syncs is how many sync calls the filesystem has counted.
func (f *FS) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// Steps are the fault points passed, in order, each as NAME@N.
func (f *FS) Steps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.steps)
}

// lastStep is the last fault point passed.
func (f *FS) lastStep() string {
	if len(f.steps) == 0 {
		return ""
	}
	return f.steps[len(f.steps)-1]
}

// Log is the operation log: namespace operations, mode changes, syncs and
// fault points, in the order the filesystem served them.
func (f *FS) Log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.log, "\n")
}

// PowerOff cuts the power now unless it was cut already, lets every request
// held at the cut fail, and returns the durable image.
func (f *FS) PowerOff() *Image {
	f.mu.Lock()
	if f.image == nil {
		f.cutLocked("at PowerOff")
	}
	img := f.image
	f.mu.Unlock()
	f.releaseOnce.Do(func() { close(f.release) })
	return img
}

// unmountPatience is how long Unmount waits for the server to see its
// connection end before it aborts the connection.
const unmountPatience = 5 * time.Second

// Unmount fails the requests held at a cut and unmounts. A mount namespace
// made while the filesystem was mounted (ip netns exec, a container, by any
// process on the machine) holds a copy of the mount, which keeps the
// connection open after the unmount here; the server would wait for it
// forever, so after a while the connection is aborted.
func (f *FS) Unmount() error {
	f.releaseOnce.Do(func() { close(f.release) })
	done := make(chan error, 1)
	go func() { done <- f.server.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(unmountPatience):
		if aerr := abortConnection(f.conn); aerr != nil {
			return fmt.Errorf("powercut: unmount %s: the connection outlives the mount: %w", f.mount, aerr)
		}
		err = <-done
	}
	if err != nil {
		if derr := unix.Unmount(f.mount, unix.MNT_DETACH); derr != nil {
			return fmt.Errorf("powercut: unmount %s: %w", f.mount, err)
		}
	}
	return nil
}

// fuseConnections is where the fusectl filesystem lists FUSE connections.
const fuseConnections = "/sys/fs/fuse/connections"

// abortConnection aborts FUSE connection conn through fusectl, mounting
// fusectl first where nobody has.
func abortConnection(conn uint32) error {
	abort := filepath.Join(fuseConnections, strconv.FormatUint(uint64(conn), 10), "abort")
	if _, err := os.Stat(abort); os.IsNotExist(err) {
		if err := unix.Mount("fusectl", fuseConnections, "fusectl", 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

func (f *FS) logf(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf(format, args...))
}

// inStep adds the last fault point passed to an operation's description.
func (f *FS) inStep(desc string) string {
	if len(f.steps) == 0 {
		return desc
	}
	return desc + " (after " + f.lastStep() + ")"
}

// cutLocked freezes the durable image.
func (f *FS) cutLocked(why string) {
	var r *rand.Rand
	if f.opts.Seed != 0 {
		r = rand.New(rand.NewPCG(f.opts.Seed, uint64(f.syncs)))
	}
	f.image = f.m.image(r, f.liveStates())
	f.image.report = fmt.Sprintf("power cut %s, after %d syncs (last fault point: %s)\n%s", why, f.syncs, f.lastStep(), f.image.report)
	f.logf("POWER CUT %s", why)
	close(f.cut)
}

// hold parks a request that arrived at or after the cut until the power is
// off for good, then fails it.
func (f *FS) hold() syscall.Errno {
	<-f.release
	return syscall.EIO
}

// liveStates reads the mode and bytes of every inode the live tree still names.
func (f *FS) liveStates() map[inodeID]liveState {
	out := map[inodeID]liveState{}
	filepath.Walk(f.backing, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		id, ok := f.m.live[st.Ino]
		if !ok {
			return nil
		}
		rel, _ := filepath.Rel(f.backing, p)
		l := liveState{path: rel, mode: st.Mode & 0o7777}
		if fi.Mode().IsRegular() {
			l.data, _ = os.ReadFile(p)
		}
		out[id] = l
		return nil
	})
	return out
}

// passStep records a fault point and cuts there if asked to.
func (f *FS) passStep(name string) syscall.Errno {
	f.mu.Lock()
	if f.image != nil {
		f.mu.Unlock()
		return f.hold()
	}
	f.passes[name]++
	step := fmt.Sprintf("%s@%d", name, f.passes[name])
	f.steps = append(f.steps, step)
	f.logf("step %s", step)
	want, nth, _ := strings.Cut(f.opts.CutAtStep, "@")
	n, err := strconv.Atoi(nth)
	if err != nil {
		n = 1
	}
	if want != name || f.passes[name] != n {
		f.mu.Unlock()
		return syscall.ENOENT
	}
	f.cutLocked("at fault point " + step)
	f.mu.Unlock()
	return f.hold()
}

// sync is an fsync or fdatasync of n.
func (f *FS) sync(n *node, flags uint32) syscall.Errno {
	f.mu.Lock()
	if f.image != nil {
		f.mu.Unlock()
		return f.hold()
	}
	datasync := flags&1 != 0 // FUSE_FSYNC_FDATASYNC
	call := map[bool]string{false: "fsync", true: "fdatasync"}[datasync]
	rel, p := n.paths()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		f.mu.Unlock()
		return fs.ToErrno(err)
	}
	id := f.m.idOf(st.Ino)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		f.m.syncDir(id, st.Mode, datasync)
	} else {
		data, err := os.ReadFile(p)
		if err != nil {
			f.mu.Unlock()
			return fs.ToErrno(err)
		}
		f.m.syncFile(id, data, st.Mode, datasync)
	}
	f.syncs++
	f.logf("sync %d: %s /%s", f.syncs, call, rel)
	if f.opts.CutAfterSync != f.syncs {
		f.mu.Unlock()
		return 0
	}
	f.cutLocked(fmt.Sprintf("right after sync %d (%s /%s)", f.syncs, call, rel))
	f.mu.Unlock()
	return f.hold()
}

// namespace runs a namespace operation on the backing tree and records it,
// serialized with the syncs so that the model sees the order the tree did.
func (f *FS) namespace(op func() syscall.Errno) syscall.Errno {
	f.mu.Lock()
	if f.image != nil {
		f.mu.Unlock()
		return f.hold()
	}
	defer f.mu.Unlock()
	return op()
}
