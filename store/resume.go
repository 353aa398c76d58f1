package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// dirResume is where a build keeps the payload files of an interrupted build
// of the same identity, until the producer reuses them or publication drops them.
const dirResume = ".resume"

// adoptStale moves the newest stale temp build of the same id (the caller
// holds its build lock) into the new build's resume area and removes the
// others, so a producer can reuse what the interrupted build wrote.
func (b *build) adoptStale() {
	matches, _ := filepath.Glob(b.d.path(dirTmp, b.id.Hex()+".*"))
	var stale []string
	for _, m := range matches {
		if m != b.dir {
			stale = append(stale, m)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return modTime(stale[i]) > modTime(stale[j]) })
	for i, s := range stale {
		endProgress(s)
		if i == 0 && os.Rename(s, filepath.Join(b.dir, dirResume)) == nil {
			continue
		}
		removeTree(s)
	}
}

func modTime(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}

// Reuse implements artifact.Writer: it adopts a payload file kept from an
// interrupted build if it holds exactly the record's size and digests,
// hashed once under the binding (BindNone: sha256 and tensor tree;
// BindTree, BindTreeStream: the tensor tree). It reports whether it did,
// with the file's hashes.
func (b *build) Reuse(bind artifact.Binding) (artifact.FileEntry, bool, error) {
	path, size := bind.Want.Path, bind.Want.Size
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return artifact.FileEntry{}, false, fmt.Errorf("payload path %q: not a plain relative path or reserved", path)
	}
	if c, ok := b.keptCheckpoints()[path]; ok && c.off < c.size {
		return artifact.FileEntry{}, false, nil // written in part: Continue's
	}
	old := filepath.Join(b.dir, dirResume, path)
	f, err := os.Open(old)
	if errors.Is(err, os.ErrNotExist) {
		return artifact.FileEntry{}, false, nil
	}
	if err != nil {
		return artifact.FileEntry{}, false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return artifact.FileEntry{}, false, nil
	}
	entry, err := artifact.HashFile(f, bind)
	if err != nil || entry.SHA256 != bind.Want.SHA256 {
		return artifact.FileEntry{}, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.files[path]; dup {
		return artifact.FileEntry{}, false, fmt.Errorf("payload %q created twice", path)
	}
	if err := b.preflight(0); err != nil {
		return artifact.FileEntry{}, false, err
	}
	if b.budget >= 0 && b.total+size > b.budget {
		return artifact.FileEntry{}, false, b.preflight(size)
	}
	full := filepath.Join(b.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return artifact.FileEntry{}, false, err
	}
	if err := os.Rename(old, full); err != nil {
		return artifact.FileEntry{}, false, err
	}
	w := &fileWriter{path: path, size: size, closed: true, whole: true, entry: entry, synced: make(chan error, 1)}
	go func() {
		g, err := os.Open(full)
		if err == nil {
			err = syncHardened(g)
			g.Close()
		}
		w.synced <- err
	}()
	b.files[path] = w
	b.total += size
	return entry, true, nil
}

// dropResume removes what the producer did not reuse.
func (b *build) dropResume() error {
	return removeTree(filepath.Join(b.dir, dirResume))
}

func isReservedPath(path string) bool {
	return isMetadataName(path) || path == dirResume || path == fileProgress || path == fileCheckpoint || strings.HasPrefix(path, dirResume+"/")
}

// Continue implements artifact.PartResumer: it adopts the prefix of a file
// the interrupted build wrote in part, as its last checkpoint records it,
// if the kept file has the record's size. The prefix is read back and
// checked as when it was written (the header region and every tensor,
// artifact.FileHasher.ResumeAt); the rest is checked as it is written,
// and Close checks the file's tree.
func (b *build) Continue(bind artifact.Binding) (artifact.FileWriter, int64, bool, error) {
	path, size := bind.Want.Path, bind.Want.Size
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return nil, 0, false, fmt.Errorf("payload path %q: not a plain relative path or reserved: %w", path, errdefs.ErrInvalidArgument)
	}
	keep := b.keeper(bind)
	c, ok := b.keptCheckpoints()[path]
	if !ok || keep == nil || c.size != size || c.off == 0 || c.off >= size {
		return nil, 0, false, nil
	}
	old := filepath.Join(b.dir, dirResume, path)
	f, err := os.OpenFile(old, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, ioerr.Classify(err, noSpace)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		f.Close()
		return nil, 0, false, nil
	}
	h, err := artifact.NewFileHasher(bind)
	if err != nil {
		f.Close()
		return nil, 0, false, err
	}
	if err := h.ResumeAt(f, c.off, c.state); err != nil {
		// The kept prefix does not hold what its record says: written again.
		h.Abort()
		f.Close()
		return nil, 0, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.files[path]; dup {
		h.Abort()
		f.Close()
		return nil, 0, false, fmt.Errorf("payload %q created twice: %w", path, errdefs.ErrAlreadyExists)
	}
	// The kept file holds its blocks already: only the budget counts it.
	err = b.preflight(0)
	if err == nil && b.budget >= 0 && b.total+size > b.budget {
		err = b.preflight(size)
	}
	if err != nil {
		h.Abort()
		f.Close()
		return nil, 0, false, err
	}
	full := filepath.Join(b.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		h.Abort()
		f.Close()
		return nil, 0, false, ioerr.Classify(err, noSpace)
	}
	if err := os.Rename(old, full); err != nil {
		h.Abort()
		f.Close()
		return nil, 0, false, ioerr.Classify(err, noSpace)
	}
	// This build's own record of the prefix, synced by the build that wrote it.
	if err := keep(c.off, c.state); err != nil {
		h.Abort()
		f.Close()
		return nil, 0, false, err
	}
	var onChecked func(off, n int64) error
	if b.announced() && bind.ChecksTensors() {
		onChecked = func(off, n int64) error { return b.record(recVerified, verifiedBody(path, off, n)) }
	}
	fw, err := newFileWriter(bind, f, &b.buffers, writerOptions{onChecked: onChecked, keep: keep, every: b.ckEvery, from: c.off, hasher: h})
	if err != nil {
		f.Close()
		return nil, 0, false, err
	}
	fw.keptOff.Store(c.off)
	b.startSyncs()
	b.files[path] = fw
	b.total += size
	return fw, c.off, true, nil
}

// Drop implements artifact.PartResumer: the file leaves the build.
func (b *build) Drop(path string) error {
	b.mu.Lock()
	w, ok := b.files[path]
	if ok {
		delete(b.files, path)
		b.total -= w.size
	}
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("payload %q: not in the build: %w", path, errdefs.ErrNotFound)
	}
	w.discard(false)
	if err := os.Remove(filepath.Join(b.dir, path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return ioerr.Classify(err, noSpace)
	}
	return nil
}

// ContinueBound implements artifact.TreeResumer: it adopts a file the
// interrupted build wrote in part under BindTree, if it has the record's
// size; the header region is read back for the tree (Close checks it
// against the record with the rest).
func (b *build) ContinueBound(bind artifact.Binding) (artifact.BoundFileWriter, io.ReaderAt, bool, error) {
	path, size := bind.Want.Path, bind.Want.Size
	if bind.By != artifact.BindTree {
		return nil, nil, false, fmt.Errorf("payload %s: only a file bound by its tree continues in any order: %w", path, errdefs.ErrInvalidArgument)
	}
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return nil, nil, false, fmt.Errorf("payload path %q: not a plain relative path or reserved: %w", path, errdefs.ErrInvalidArgument)
	}
	old := filepath.Join(b.dir, dirResume, path)
	f, err := os.OpenFile(old, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, ioerr.Classify(err, noSpace)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		f.Close()
		return nil, nil, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fail := func(err error) (artifact.BoundFileWriter, io.ReaderAt, bool, error) {
		f.Close()
		return nil, nil, false, err
	}
	if _, dup := b.files[path]; dup {
		return fail(fmt.Errorf("payload %q created twice: %w", path, errdefs.ErrAlreadyExists))
	}
	err = b.preflight(0)
	if err == nil && b.budget >= 0 && b.total+size > b.budget {
		err = b.preflight(size)
	}
	if err != nil {
		return fail(err)
	}
	full := filepath.Join(b.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return fail(ioerr.Classify(err, noSpace))
	}
	if err := os.Rename(old, full); err != nil {
		return fail(ioerr.Classify(err, noSpace))
	}
	fw, err := newFileWriter(bind, f, &b.buffers, writerOptions{})
	if err != nil {
		return fail(err)
	}
	// A header region that does not read back whole fails its unit's check
	// and is written again, and its copy with it.
	io.ReadFull(io.NewSectionReader(f, 0, int64(len(fw.tree.header))), fw.tree.header)
	b.startSyncs()
	b.files[path] = fw
	b.total += size
	return fw, f, true, nil
}
