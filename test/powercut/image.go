package powercut

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Image is a durable image: what the disk holds after a cut.
type Image struct {
	root   inodeID
	nodes  map[inodeID]*inode
	report string
}

// Report lists what the cut lost and what a random subset kept anyway.
func (img *Image) Report() string { return img.report }

// Snapshot reads the tree at dir (files, directories and symbolic links)
// as a durable image, so that each cut can start from a fresh copy of one
// prepared state.
func Snapshot(dir string) (*Image, error) {
	m := newModel()
	if err := m.load(dir); err != nil {
		return nil, err
	}
	return m.image(nil, nil), nil
}

// load makes the tree at root the model's durable image.
func (m *model) load(root string) error {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return err
	}
	m.root = m.born(st.Ino, kindDir, st.Mode, "")
	return m.loadDir(root, m.root)
}

func (m *model) loadDir(dir string, id inodeID) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		child, seen := m.live[st.Ino]
		if !seen {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				child = m.born(st.Ino, kindDir, st.Mode, "")
				if err := m.loadDir(p, child); err != nil {
					return err
				}
			case unix.S_IFLNK:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				child = m.born(st.Ino, kindSymlink, st.Mode, target)
			case unix.S_IFREG:
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				child = m.born(st.Ino, kindFile, st.Mode, "")
				m.durable[child].data = data
			default:
				return fmt.Errorf("%s: the power-cut filesystem holds only files, directories and symbolic links", p)
			}
		}
		m.durable[id].entries[e.Name()] = child
	}
	return nil
}

// Materialise writes the image as a tree at dir (created if needed), with
// its modes and hard links.
func (img *Image) Materialise(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	w := &treeWriter{img: img, paths: map[inodeID]string{}}
	return w.dir(dir, img.root)
}

type treeWriter struct {
	img   *Image
	paths map[inodeID]string // where each inode was written first
}

func (w *treeWriter) dir(path string, id inodeID) error {
	if _, seen := w.paths[id]; seen {
		return fmt.Errorf("directory inode %d is durable under two names", id)
	}
	w.paths[id] = path
	n := w.img.nodes[id]
	names := make([]string, 0, len(n.entries))
	for name := range n.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		child := n.entries[name]
		c, p := w.img.nodes[child], filepath.Join(path, name)
		var err error
		switch first, seen := w.paths[child]; {
		case c.kind == kindDir:
			if err = os.Mkdir(p, 0o700); err == nil {
				err = w.dir(p, child)
			}
		case c.kind == kindSymlink:
			err = os.Symlink(string(c.data), p)
		case seen:
			err = os.Link(first, p)
		default:
			w.paths[child] = p
			if err = os.WriteFile(p, c.data, 0o600); err == nil {
				err = unix.Chmod(p, c.mode)
			}
		}
		if err != nil {
			return err
		}
	}
	return unix.Chmod(path, n.mode)
}
