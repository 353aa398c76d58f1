// Package powercut is a test filesystem that loses power: a FUSE loopback
// over a backing directory which, beside the live tree every process sees,
// keeps a conservative model of what a disk would still hold after a power
// cut. A file's bytes (and size) reach the durable image only when that file
// is fsynced or fdatasynced, its mode only when it is fsynced; create, mkdir,
// symlink, link, unlink, rmdir and rename reach it only when the directory
// that holds the new name (the removed name, for unlink and rmdir) is
// fsynced, each after the earlier operations on the same inode or name.
// Everything else lives in memory and is lost at the cut.
//
// The filesystem counts sync calls and cuts the power right after the k-th
// one, at a named store fault point (announced by a lookup of
// .powercut-step.NAME in its root), or when asked; from then on it exposes
// only the durable image. With a seed, the cut also persists a random subset
// of what was not yet durable, in an order the model allows: namespace
// operations closed under their dependencies, modes, and file contents whole,
// not at all, or torn block by block with either size.
package powercut

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

type kind uint8

const (
	kindFile kind = iota
	kindDir
	kindSymlink
)

// inodeID names one inode of the model across renames; a backing inode
// number reused after an unlink gets a new one.
type inodeID uint64

// inode is what the durable image holds of one inode.
type inode struct {
	kind    kind
	mode    uint32             // permission bits
	data    []byte             // a file's bytes, a symbolic link's target
	entries map[string]inodeID // a directory's names
}

func (n *inode) clone() *inode {
	c := *n
	c.entries = maps.Clone(n.entries)
	return &c
}

// nsOp is a namespace operation that is not durable yet.
type nsOp struct {
	what    string // create, mkdir, symlink, link, unlink, rmdir, rename
	dir     inodeID
	name    string
	child   inodeID
	newDir  inodeID // rename only
	newName string
	desc    string // how the operation log shows it
}

// syncedBy is the directory whose fsync makes the operation durable: the one
// holding the new name, or the removed one.
func (o *nsOp) syncedBy() inodeID {
	if o.what == "rename" {
		return o.newDir
	}
	return o.dir
}

type entryKey struct {
	dir  inodeID
	name string
}

func (o *nsOp) keys() []entryKey {
	if o.what == "rename" {
		return []entryKey{{o.dir, o.name}, {o.newDir, o.newName}}
	}
	return []entryKey{{o.dir, o.name}}
}

// dependsOn says whether o must not become durable before the earlier p:
// both name the same inode or the same directory entry.
func (o *nsOp) dependsOn(p *nsOp) bool {
	if o.child == p.child {
		return true
	}
	for _, a := range o.keys() {
		for _, b := range p.keys() {
			if a == b {
				return true
			}
		}
	}
	return false
}

func (o *nsOp) apply(img map[inodeID]*inode) {
	switch o.what {
	case "unlink", "rmdir":
		removeEntry(img, o.dir, o.name, o.child)
	case "rename":
		removeEntry(img, o.dir, o.name, o.child)
		img[o.newDir].entries[o.newName] = o.child
	default: // create, mkdir, symlink, link
		img[o.dir].entries[o.name] = o.child
	}
}

func removeEntry(img map[inodeID]*inode, dir inodeID, name string, child inodeID) {
	if d := img[dir]; d.entries[name] == child {
		delete(d.entries, name)
	}
}

// model is the durable image and the operations that have not reached it.
// The caller serializes every call.
type model struct {
	root    inodeID
	last    inodeID
	durable map[inodeID]*inode
	live    map[uint64]inodeID // backing inode number -> the inode it is now
	pending []*nsOp
}

func newModel() *model {
	return &model{durable: map[inodeID]*inode{}, live: map[uint64]inodeID{}}
}

// born registers a new inode at backing inode number ino, durable only as
// an unnamed inode with its creation mode and no content.
func (m *model) born(ino uint64, k kind, mode uint32, target string) inodeID {
	m.last++
	n := &inode{kind: k, mode: mode & 0o7777}
	switch k {
	case kindDir:
		n.entries = map[string]inodeID{}
	case kindSymlink:
		n.data = []byte(target)
	}
	m.durable[m.last] = n
	m.live[ino] = m.last
	return m.last
}

// idOf is the inode now at backing inode number ino.
func (m *model) idOf(ino uint64) inodeID {
	id, ok := m.live[ino]
	if !ok { // not seen being made; it was never durable
		id = m.born(ino, kindFile, 0, "")
	}
	return id
}

func (m *model) record(op *nsOp) { m.pending = append(m.pending, op) }

// syncFile is an fsync (datasync: fdatasync) of a file with these contents and mode.
func (m *model) syncFile(id inodeID, data []byte, mode uint32, datasync bool) {
	n := m.durable[id]
	n.data = data
	if !datasync {
		n.mode = mode & 0o7777
	}
}

// syncDir is an fsync of directory id: every pending operation it decides
// becomes durable, each after the earlier ones it depends on.
func (m *model) syncDir(id inodeID, mode uint32, datasync bool) {
	chosen := make([]bool, len(m.pending))
	for i, op := range m.pending {
		if op.syncedBy() == id {
			m.closure(i, chosen)
		}
	}
	m.persist(m.durable, chosen)
	if !datasync {
		m.durable[id].mode = mode & 0o7777
	}
	kept := m.pending[:0]
	for i, op := range m.pending {
		if !chosen[i] {
			kept = append(kept, op)
		}
	}
	m.pending = kept
}

// closure chooses pending operation i and every earlier one it depends on.
func (m *model) closure(i int, chosen []bool) {
	if chosen[i] {
		return
	}
	chosen[i] = true
	for j := i - 1; j >= 0; j-- {
		if !chosen[j] && m.pending[i].dependsOn(m.pending[j]) {
			m.closure(j, chosen)
		}
	}
}

// persist applies the chosen operations to img in the order they happened.
func (m *model) persist(img map[inodeID]*inode, chosen []bool) {
	for i, op := range m.pending {
		if chosen[i] {
			op.apply(img)
		}
	}
}

// liveState is an inode's live mode and (for files) bytes at a cut.
type liveState struct {
	path string // relative to the root, for the report
	mode uint32
	data []byte
}

// image is the durable image at a cut: exactly what was synced, or, with r,
// plus a random subset of what was not, given the live states.
func (m *model) image(r *rand.Rand, live map[inodeID]liveState) *Image {
	img := &Image{root: m.root, nodes: make(map[inodeID]*inode, len(m.durable))}
	for id, n := range m.durable {
		img.nodes[id] = n.clone()
	}
	chosen := make([]bool, len(m.pending))
	var c *coin
	if r != nil {
		c = newCoin(r)
		for i := range m.pending {
			if c.heads() {
				m.closure(i, chosen)
			}
		}
	}
	m.persist(img.nodes, chosen)
	var lost, kept []string
	for i, op := range m.pending {
		if chosen[i] {
			kept = append(kept, op.desc)
		} else {
			lost = append(lost, op.desc)
		}
	}
	l, k := img.settle(c, live)
	img.report = reportOf(append(lost, l...), append(kept, k...))
	return img
}

// coin decides what a random cut persists: each thing with one probability,
// drawn per cut, so that some cuts keep little and some nearly everything.
type coin struct {
	r *rand.Rand
	p float64
}

func newCoin(r *rand.Rand) *coin {
	return &coin{r: r, p: [...]float64{0.25, 0.5, 0.75, 0.95}[r.IntN(4)]}
}

// heads says whether to persist the next thing; a nil coin persists nothing.
func (c *coin) heads() bool { return c != nil && c.r.Float64() < c.p }

// settle decides, for each inode whose live mode or bytes differ from the
// durable ones, what the image keeps: without c the durable ones; with c,
// at random, the live mode or not, and a file's live bytes or not, whole or
// torn (either size, each block from the old or the new bytes).
func (img *Image) settle(c *coin, live map[inodeID]liveState) (lost, kept []string) {
	ids := make([]inodeID, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same seed draws the same choices
	for _, id := range ids {
		n, l := img.nodes[id], live[id]
		if l.mode != n.mode {
			d := fmt.Sprintf("mode %o of /%s (durable: %o)", l.mode, l.path, n.mode)
			if c.heads() {
				n.mode = l.mode
				kept = append(kept, d)
			} else {
				lost = append(lost, d)
			}
		}
		if n.kind != kindFile || bytes.Equal(l.data, n.data) {
			continue
		}
		d := fmt.Sprintf("bytes of /%s (%d live, %d durable)", l.path, len(l.data), len(n.data))
		switch {
		case !c.heads():
			lost = append(lost, d)
		case c.r.IntN(2) == 0:
			n.data = l.data
			kept = append(kept, "all "+d)
		default:
			n.data = c.torn(n.data, l.data)
			kept = append(kept, fmt.Sprintf("torn %s: %d bytes", d, len(n.data)))
		}
	}
	return lost, kept
}

// tornBlock is the unit in which a torn file's blocks persist.
const tornBlock = 4096

// torn is a file's bytes after a cut that persisted part of a change:
// either size, each block from the old or the new bytes.
func (c *coin) torn(old, now []byte) []byte {
	size := len(old)
	if c.heads() {
		size = len(now)
	}
	out := make([]byte, size)
	for off := 0; off < size; off += tornBlock {
		end := min(off+tornBlock, size)
		src := old
		if c.heads() {
			src = now
		}
		if off < len(src) {
			copy(out[off:end], src[off:min(end, len(src))])
		}
	}
	return out
}

func reportOf(lost, kept []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "not durable at the cut (%d):\n", len(lost))
	for _, s := range lost {
		fmt.Fprintf(&b, "  - %s\n", s)
	}
	if len(kept) > 0 {
		fmt.Fprintf(&b, "persisted anyway by the random subset (%d):\n", len(kept))
		for _, s := range kept {
			fmt.Fprintf(&b, "  + %s\n", s)
		}
	}
	return b.String()
}
