package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// build is an invisible temp build of one artifact, written through the
// store-scoped writer. Only publish makes it visible.
type build struct {
	d        *Domain
	identity artifact.Identity
	id       artifact.ID
	dir      string // tmp/<id>.<random>
	budget   int64  // bytes this artifact may still take (max_artifact_bytes, max_store_bytes)
	ckEvery  int64  // bytes of a file between two checkpoints (checkpointEvery)

	mu      sync.Mutex
	files   map[string]*fileWriter
	total   int64
	buffers sync.Pool // chunk buffers of the files' write pipelines

	// progMu guards progress, the progress file once announced (seed.go).
	// It is taken after mu, never before: the files' hash and write stages
	// record ranges under progMu alone while a writer may hold mu.
	progMu   sync.Mutex
	progress *os.File

	// ckMu guards ckFile, the checkpoint file once a file recorded one
	// (checkpoint.go); kept are the adopted build's records, read once.
	ckMu     sync.Mutex
	ckFile   *os.File
	keptOnce sync.Once
	kept     map[string]checkpoint
}

// newBuild starts a temp build under tmp/<owner>.<random>: owner is the
// identity hex, or an anonymous name while an import learns its identity.
func (d *Domain) newBuild(ctx context.Context, identity artifact.Identity, id artifact.ID, owner string) (*build, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	b := &build{d: d, identity: identity, id: id, files: map[string]*fileWriter{}, budget: -1, ckEvery: checkpointEvery,
		dir: d.path(dirTmp, owner+"."+hex.EncodeToString(rnd[:]))}
	if p := d.policy; p.MaxArtifactBytes > 0 {
		b.budget = int64(p.MaxArtifactBytes)
	}
	if p := d.policy; p.MaxStoreBytes > 0 {
		if left := max(int64(p.MaxStoreBytes)-d.UsedBytes(), 0); b.budget < 0 || left < b.budget {
			b.budget = left
		}
	}
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create temp build: %w", ioerr.Classify(err, noSpace))
	}
	return b, nil
}

// Create implements artifact.Writer: the file is hashed as it is written.
func (b *build) Create(path string, size int64) (artifact.FileWriter, error) {
	return b.create(artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: path, Size: size}}})
}

// CreateBound implements artifact.Writer.
func (b *build) CreateBound(bind artifact.Binding) (artifact.BoundFileWriter, error) {
	return b.create(bind)
}

func (b *build) create(bind artifact.Binding) (*fileWriter, error) {
	path, size := bind.Want.Path, bind.Want.Size
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return nil, fmt.Errorf("payload path %q: not a plain relative path or reserved: %w", path, errdefs.ErrInvalidArgument)
	}
	if size < 0 {
		return nil, fmt.Errorf("payload %q: negative size: %w", path, errdefs.ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.files[path]; dup {
		return nil, fmt.Errorf("payload %q created twice: %w", path, errdefs.ErrAlreadyExists)
	}
	if err := b.preflight(size); err != nil {
		return nil, err
	}
	full := filepath.Join(b.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return nil, ioerr.Classify(err, noSpace)
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, ioerr.Classify(err, noSpace)
	}
	if size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			f.Close()
			os.Remove(full)
			return nil, b.preallocFailed(fmt.Errorf("preallocate %s: %w", path, err), size)
		}
	}
	var onChecked func(off, n int64) error
	if b.announced() && bind.ChecksTensors() {
		onChecked = func(off, n int64) error { return b.record(recVerified, verifiedBody(path, off, n)) }
	}
	fw, err := newFileWriter(bind, f, &b.buffers, writerOptions{onChecked: onChecked, keep: b.keeper(bind), every: b.ckEvery})
	if err != nil {
		f.Close()
		os.Remove(full)
		return nil, err
	}
	b.startSyncs()
	b.files[path] = fw
	b.total += size
	return fw, nil
}

// keeper is how a file written in order records its checkpoints: only a
// Resumable file (artifact.Resumable) of a build of a known identity does,
// since only such a build is adopted by the next one (adoptStale).
func (b *build) keeper(bind artifact.Binding) func(off int64, state []byte) error {
	if !artifact.Resumable(bind) || !strings.HasPrefix(filepath.Base(b.dir), b.id.Hex()+".") {
		return nil
	}
	path, size := bind.Want.Path, bind.Want.Size
	return func(off int64, state []byte) error { return b.keep(path, off, size, state) }
}

// preflight checks the capacity limits and free space for size more bytes.
// Past max_store_bytes or min_free_bytes it stops the build for the room it
// lacks (capacity.go).
func (b *build) preflight(size int64) error {
	err := b.checkSpace(size)
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.Limit == "max_artifact_bytes" {
		return err
	}
	return b.roomFor(ce, size)
}

// checkSpace is preflight without eviction.
func (b *build) checkSpace(size int64) error {
	if b.budget >= 0 && b.total+size > b.budget {
		limit := "max_artifact_bytes"
		if p := b.d.policy; p.MaxArtifactBytes == 0 || b.budget < int64(p.MaxArtifactBytes) {
			limit = "max_store_bytes"
		}
		return &CapacityError{Limit: limit, Need: b.total + size, Have: b.budget}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(b.dir, &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free-size < int64(b.d.policy.MinFreeBytes) {
		return &CapacityError{Limit: "min_free_bytes", Need: size + int64(b.d.policy.MinFreeBytes), Have: free}
	}
	return nil
}

func isMetadataName(path string) bool {
	return path == fileReady || path == fileManifest || path == fileIndex
}

// Entry returns the file's entry, its hashes; it is valid after Close.
func (w *fileWriter) Entry() (artifact.FileEntry, error) {
	if !w.closed {
		return artifact.FileEntry{}, fmt.Errorf("payload %s: entry before close: %w", w.path, errdefs.ErrFailedPrecondition)
	}
	return w.entry, w.err
}

// abort discards the temp build.
func (b *build) abort() {
	b.stop(false)
	removeTree(b.dir)
}

// release stops every file's pipeline and waits for its fsync, leaving the
// temp build on disk, each file stopped part way with a last checkpoint,
// for the next build of its identity to continue. It returns the payload
// bytes kept: the files written whole and the prefixes checkpointed.
func (b *build) release() int64 {
	b.stop(true)
	return b.keptBytes()
}

// keptBytes are the payload bytes a stopped build keeps for the next one.
func (b *build) keptBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, w := range b.files {
		switch {
		case w.whole:
			n += w.size
		case w.tree != nil:
			n += w.tree.landedBytes() // each checked again by the next build
		default:
			n += w.keptOff.Load()
		}
	}
	return n
}

func (b *build) stop(keep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.progMu.Lock()
	if b.progress != nil {
		appendRecord(b.progress, recEnd, nil)
		b.progress.Close()
		b.progress = nil
	}
	b.progMu.Unlock()
	for _, w := range b.files {
		w.discard(keep)
	}
	b.closeCheckpoints(false)
}

// removeTree removes a temp build or tombstone tree, first making hardened
// directories writable. A crash part-way leaves a partial tree: a
// tombstone's is finished by the next Open, gc, removal, eviction or build.
func removeTree(dir string) error {
	removedOne := false
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		switch {
		case err != nil:
		case e.IsDir():
			os.Chmod(p, 0o700)
		case !removedOne:
			removedOne = os.Remove(p) == nil
		}
		return nil
	})
	faultPoint("remove.mid-delete")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// startSyncs starts the fsync of every closed file whose fsync is pending.
func (b *build) startSyncs() {
	for _, w := range b.files {
		w.mu.Lock()
		if w.startSync != nil {
			go w.startSync()
			w.startSync = nil
		}
		w.mu.Unlock()
	}
}
