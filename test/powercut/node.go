package powercut

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node that reports namespace operations and syncs to
// the model.
type node struct {
	*fs.LoopbackNode
	pc *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), pc: n.pc}
}

// paths are n's path relative to the root and in the backing tree.
func (n *node) paths() (rel, backing string) {
	rel = n.Path(nil)
	return rel, filepath.Join(n.RootData.Path, rel)
}

// ino is n's backing inode number (FUSE numbers the root 1).
func (n *node) ino() uint64 {
	if n.IsRoot() {
		return n.pc.rootIno
	}
	return n.StableAttr().Ino
}

// show is how the log names entry name of directory n.
func (n *node) show(name string) string {
	rel, _ := n.paths()
	return "/" + filepath.Join(rel, name)
}

func (n *node) backingIno(name string) (uint64, syscall.Errno) {
	_, dir := n.paths()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	return st.Ino, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if step, ok := strings.CutPrefix(name, stepPrefix); ok && n.IsRoot() {
		return nil, n.pc.passStep(step)
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

// created records a new inode named name in n.
func (n *node) created(what, name string, ch *fs.Inode, k kind, mode uint32, target string) {
	m := n.pc.m
	child := m.born(ch.StableAttr().Ino, k, mode, target)
	desc := n.pc.inStep(fmt.Sprintf("%s %s (mode %o)", what, n.show(name), mode&0o7777))
	m.record(&nsOp{what: what, dir: m.idOf(n.ino()), name: name, child: child, desc: desc})
	n.pc.logf("%s", desc)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	errno = n.pc.namespace(func() syscall.Errno {
		_, absent := n.backingIno(name)
		ch, fh, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		if errno == 0 && absent != 0 { // an open of an existing file makes no inode
			n.created("create", name, ch, kindFile, out.Attr.Mode, "")
		}
		return errno
	})
	return ch, fh, fuseFlags, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.pc.namespace(func() syscall.Errno {
		if ch, errno = n.LoopbackNode.Mkdir(ctx, name, mode, out); errno == 0 {
			n.created("mkdir", name, ch, kindDir, out.Attr.Mode, "")
		}
		return errno
	})
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	if mode&unix.S_IFMT != unix.S_IFREG {
		return nil, syscall.EPERM // the model holds files, directories and links only
	}
	errno = n.pc.namespace(func() syscall.Errno {
		if ch, errno = n.LoopbackNode.Mknod(ctx, name, mode, rdev, out); errno == 0 {
			n.created("create", name, ch, kindFile, out.Attr.Mode, "")
		}
		return errno
	})
	return ch, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.pc.namespace(func() syscall.Errno {
		if ch, errno = n.LoopbackNode.Symlink(ctx, target, name, out); errno == 0 {
			n.created("symlink", name, ch, kindSymlink, out.Attr.Mode, target)
		}
		return errno
	})
	return ch, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.pc.namespace(func() syscall.Errno {
		if ch, errno = n.LoopbackNode.Link(ctx, target, name, out); errno == 0 {
			m := n.pc.m
			desc := n.pc.inStep("link " + n.show(name))
			m.record(&nsOp{what: "link", dir: m.idOf(n.ino()), name: name, child: m.idOf(ch.StableAttr().Ino), desc: desc})
			n.pc.logf("%s", desc)
		}
		return errno
	})
	return ch, errno
}

func (n *node) remove(what, name string, rm func() syscall.Errno) syscall.Errno {
	return n.pc.namespace(func() syscall.Errno {
		ino, errno := n.backingIno(name)
		if errno != 0 {
			return errno
		}
		if errno := rm(); errno != 0 {
			return errno
		}
		m := n.pc.m
		desc := n.pc.inStep(what + " " + n.show(name))
		m.record(&nsOp{what: what, dir: m.idOf(n.ino()), name: name, child: m.idOf(ino), desc: desc})
		n.pc.logf("%s", desc)
		return 0
	})
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove("unlink", name, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove("rmdir", name, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&unix.RENAME_EXCHANGE != 0 {
		return syscall.EINVAL // not modelled
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	return n.pc.namespace(func() syscall.Errno {
		ino, errno := n.backingIno(name)
		if errno != 0 {
			return errno
		}
		if errno := n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags); errno != 0 {
			return errno
		}
		m := n.pc.m
		desc := n.pc.inStep(fmt.Sprintf("rename %s -> %s", n.show(name), np.show(newName)))
		m.record(&nsOp{what: "rename", dir: m.idOf(n.ino()), name: name, child: m.idOf(ino),
			newDir: m.idOf(np.ino()), newName: newName, desc: desc})
		n.pc.logf("%s", desc)
		return 0
	})
}

// Setattr logs mode and size changes; they reach the durable image with the
// inode's next fsync.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	if errno != 0 {
		return errno
	}
	rel, _ := n.paths()
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	if mode, ok := in.GetMode(); ok {
		n.pc.logf("chmod /%s %o", rel, mode&0o7777)
	}
	if size, ok := in.GetSize(); ok {
		n.pc.logf("truncate /%s %d", rel, size)
	}
	return 0
}

// Fsync of a file (and of a directory opened without a handle of ours)
// reaches the model instead of the backing disk.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	return n.pc.sync(n, flags)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{dir: h.(loopbackDir), n: n}, fuseFlags, 0
}

type loopbackDir interface {
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
}

// dirHandle is an open directory whose fsync reaches the model.
type dirHandle struct {
	dir loopbackDir
	n   *node
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return h.dir.Readdirent(ctx)
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return h.dir.Seekdir(ctx, off)
}

func (h *dirHandle) Releasedir(ctx context.Context, flags uint32) { h.dir.Releasedir(ctx, flags) }

func (h *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.pc.sync(h.n, flags)
}
