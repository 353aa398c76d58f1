package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/fanout"
	"golang.org/x/sys/unix"
)

// Size caps for the metadata files, so a corrupt file cannot exhaust
// memory; the index is bounded by what the manifest's files need
// (artifact.IndexBound).
const (
	maxReadyBytes    = 64 << 10
	maxManifestBytes = 64 << 20
)

// LeaseFile is one payload file of a leased artifact: its path and an open
// read-only descriptor (for hardlinked views and sendfile), whose type,
// mode and size the lookup checked. Its bytes are mapped on first use
// (Data), so a lease that only links or sends its files maps none.
type LeaseFile struct {
	Path  string // relative to the artifact directory
	Abs   string // absolute path in the store
	File  *os.File
	Entry artifact.FileEntry

	mapOnce sync.Once
	data    []byte // read-only shared mapping, once Data made it
	mapErr  error
}

// Data is the file's bytes: a read-only shared mapping of the descriptor
// the lookup checked (the same inode, its size checked again before it is
// mapped), made on the first call and kept until the lease closes; nil for
// an empty file. Safe for concurrent use; invalid after the lease's Close.
func (f *LeaseFile) Data() ([]byte, error) {
	f.mapOnce.Do(func() {
		if f.Entry.Size == 0 {
			return
		}
		fd, err := f.FD()
		if err != nil {
			f.mapErr = fmt.Errorf("map %s: %w", f.Path, err)
			return
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			f.mapErr = fmt.Errorf("map %s: %w", f.Path, err)
			return
		}
		if st.Size != f.Entry.Size {
			f.mapErr = fmt.Errorf("map %s: size %d, index says %d: %w", f.Path, st.Size, f.Entry.Size, errdefs.ErrDataLoss)
			return
		}
		if f.data, err = unix.Mmap(fd, 0, int(f.Entry.Size), unix.PROT_READ, unix.MAP_SHARED); err != nil {
			f.mapErr = fmt.Errorf("map %s: %w", f.Path, err)
		}
	})
	return f.data, f.mapErr
}

// FD is the descriptor of File, read without File.Fd.
// File.Fd would set it blocking, a system call or two for each file of a view.
// It stays the lease's, valid until Close.
func (f *LeaseFile) FD() (int, error) {
	rc, err := f.File.SyscallConn()
	if err != nil {
		return 0, err
	}
	fd := -1
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return 0, err
	}
	return fd, nil
}

// opened is an artifact directory whose metadata was read and whose payload
// files are open (and mapped once used), or, for a deferred opening, open
// once asked for (file, openAll) beneath the directory it keeps open.
type opened struct {
	id       artifact.ID
	ino      uint64 // the directory's inode when it was validated
	dir      string
	ready    *Ready
	manifest *Manifest
	index    *artifact.Index

	mu    sync.Mutex
	dfd   int          // the artifact directory while a payload file is still to be opened, or -1
	files []*LeaseFile // in the index's order; nil for a file not opened yet
	open  int          // how many of files are opened
}

func (o *opened) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.files {
		if f == nil {
			continue
		}
		if f.data != nil {
			unix.Munmap(f.data)
			f.data = nil
		}
		f.File.Close()
	}
	o.files, o.open = nil, 0
	o.closeDir()
}

// closeDir closes the artifact directory; o.mu is held.
func (o *opened) closeDir() {
	if o.dfd >= 0 {
		unix.Close(o.dfd)
		o.dfd = -1
	}
}

// validateDir opens artifacts/<id> and validates it in the given mode. A
// missing directory is ErrMiss; anything wrong with it is an *InvalidError.
// A full checksum stops when ctx is done and returns its error, wrapped:
// a cancelled validation never finds the artifact invalid.
func (d *Domain) validateDir(ctx context.Context, id artifact.ID, mode ValidationMode) (*opened, error) {
	o, err := d.validateMeta(id)
	if err != nil {
		return nil, err
	}
	if err := o.openAll(); err != nil {
		o.close()
		return nil, err
	}
	if mode == FullChecksum {
		if err := verifyHashes(ctx, id, o.files, hashCheck{}); err != nil {
			o.close()
			if ctx.Err() != nil && !IsInvalid(err) {
				return nil, fmt.Errorf("checksum of artifact %s: %w", id.Short(), err)
			}
			return nil, err
		}
	}
	return o, nil
}

// validateMeta opens artifacts/<id> and validates its mode and metadata
// (READY.json, the manifest, the index), and keeps the directory open for
// its payload files, none of which it opens. Its errors are validateDir's.
func (d *Domain) validateMeta(id artifact.ID) (*opened, error) {
	dir := d.path(dirArtifacts, id.Hex())
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrMiss
	}
	if err != nil {
		return nil, readFailure(id, "", fmt.Errorf("open artifact directory: %w", err))
	}
	o := &opened{id: id, dir: dir, dfd: dfd}
	if err := d.readDir(o); err != nil {
		unix.Close(dfd)
		return nil, err
	}
	o.files = make([]*LeaseFile, len(o.index.Files))
	o.count(0)
	return o, nil
}

// readDir checks the mode of o's directory and reads its metadata into o.
func (d *Domain) readDir(o *opened) error {
	bad := func(file, tensor, format string, args ...any) error {
		return &InvalidError{ID: o.id, File: file, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(o.dfd, &st); err != nil {
		return readFailure(o.id, "", err)
	}
	if os.FileMode(st.Mode).Perm() != dirHardened {
		return bad("", "", "directory mode %o is not the hardened %o (publication unfinished or invalidated)", st.Mode&0o7777, dirHardened)
	}
	o.ino = st.Ino
	readyRaw, err := readSmall(o.dfd, fileReady, maxReadyBytes)
	if err != nil {
		return readFailure(o.id, fileReady, err)
	}
	if o.ready, err = DecodeReady(readyRaw); err != nil {
		return bad(fileReady, "", "%v", err)
	}
	o.manifest, o.index, err = d.readMeta(o.dfd, o.id, o.ready)
	return err
}

// file is the payload file i of o's index, opened and checked
// (openPayload, checkTensorTable) on the first call.
func (o *opened) file(i int) (*LeaseFile, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.files == nil {
		return nil, fmt.Errorf("artifact %s: lease closed", o.id.Short())
	}
	if f := o.files[i]; f != nil {
		return f, nil
	}
	f, err := o.openFile(i)
	if err != nil {
		return nil, err
	}
	o.files[i] = f
	o.count(1)
	return f, nil
}

// openAll opens and checks each file of o's index, a fresh opening's
// (validateMeta opens none), with openPayload and checkTensorTable: a
// model of many files on a few goroutines (internal/fanout). The error is
// the first failing file's, in the index's order.
func (o *opened) openAll() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := make([]*LeaseFile, len(o.files))
	err := fanout.Each(len(o.files), func(i int) error {
		f, err := o.openFile(i)
		got[i] = f
		return err
	})
	n := 0
	for i, f := range got {
		if f != nil {
			o.files[i] = f
			n++
		}
	}
	o.count(n)
	return err
}

// count counts n more files opened; the directory is closed once every
// one is. o.mu is held.
func (o *opened) count(n int) {
	if o.open += n; o.open == len(o.files) {
		o.closeDir()
	}
}

// all is every payload file when each is open, else nil.
func (o *opened) all() []*LeaseFile {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open != len(o.files) {
		return nil
	}
	return o.files
}

// openFile opens and checks the payload file i of o's index; o.mu is held.
func (o *opened) openFile(i int) (*LeaseFile, error) {
	e := o.index.Files[i]
	lf, err := openPayload(o.dfd, o.dir, e)
	if err != nil {
		return nil, readFailure(o.id, e.Path, err)
	}
	if err := checkTensorTable(lf.File, e); err != nil {
		lf.File.Close()
		var ie *InvalidError
		if errors.As(err, &ie) {
			return nil, ie.with(o.id)
		}
		return nil, readFailure(o.id, e.Path, err)
	}
	return lf, nil
}

// readMeta reads the manifest and the index beside READY.json in the
// artifact directory dfd, checks their sha256 against it, and decodes and
// cross-checks them, or takes the decoding of those very bytes from the
// domain's cache (metacache.go).
func (d *Domain) readMeta(dfd int, id artifact.ID, ready *Ready) (*Manifest, *artifact.Index, error) {
	bad := func(file, format string, args ...any) error {
		return &InvalidError{ID: id, File: file, Reason: fmt.Sprintf(format, args...)}
	}
	manRaw, err := readSmall(dfd, fileManifest, maxManifestBytes)
	if err != nil {
		return nil, nil, readFailure(id, fileManifest, err)
	}
	if sha256Hex(manRaw) != ready.ManifestSHA256 {
		return nil, nil, bad(fileManifest, "sha256 does not match READY.json")
	}
	key := metaKey{manifestSHA256: ready.ManifestSHA256, indexSHA256: ready.IndexSHA256}
	meta, cached := d.meta.get(key)
	if !cached {
		if meta.manifest, err = DecodeManifest(manRaw); err != nil {
			return nil, nil, bad(fileManifest, "%v", err)
		}
		paths, sizes := make([]string, len(meta.manifest.Files)), make([]int64, len(meta.manifest.Files))
		for i, f := range meta.manifest.Files {
			paths[i], sizes[i] = f.Path, f.Size
		}
		meta.indexBound = artifact.IndexBound(paths, sizes)
	}
	if meta.manifest.ID != id || ready.ID != id {
		return nil, nil, bad(fileManifest, "identity digest %s does not name this directory", meta.manifest.ID)
	}
	idxRaw, err := readSmall(dfd, fileIndex, meta.indexBound)
	if err != nil {
		return nil, nil, readFailure(id, fileIndex, err)
	}
	if sha256Hex(idxRaw) != ready.IndexSHA256 {
		return nil, nil, bad(fileIndex, "sha256 does not match READY.json")
	}
	if cached {
		return meta.manifest, meta.index, nil
	}
	if meta.index, err = artifact.DecodeIndex(idxRaw); err != nil {
		return nil, nil, bad(fileIndex, "%v", err)
	}
	if err := checkIndexAgainstManifest(meta.index, meta.manifest); err != nil {
		return nil, nil, bad(fileIndex, "%v", err)
	}
	d.meta.put(key, meta)
	return meta.manifest, meta.index, nil
}

// readFailure classifies an error met while reading an artifact: an I/O
// failure of the store (retryable, never a reason to deny) or a finding
// about the artifact's content.
func readFailure(id artifact.ID, file string, err error) error {
	for _, transient := range []error{unix.EIO, unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN,
		unix.EINTR, unix.EBUSY, unix.ESTALE, unix.ETIMEDOUT} {
		if errors.Is(err, transient) {
			return storageErr("read artifact "+id.Short()+" "+file, err)
		}
	}
	return &InvalidError{ID: id, File: file, Reason: err.Error()}
}

func (e *InvalidError) with(id artifact.ID) *InvalidError { e.ID = id; return e }

func checkIndexAgainstManifest(x *artifact.Index, m *Manifest) error {
	if x.ID != m.ID || len(x.Files) != len(m.Files) {
		return fmt.Errorf("index does not describe the manifest's files")
	}
	for i, f := range x.Files {
		mf := m.Files[i]
		if f.Path != mf.Path || f.Size != mf.Size || f.SHA256 != mf.SHA256 || f.BLAKE3 != mf.BLAKE3 {
			return fmt.Errorf("index entry %q differs from the manifest", f.Path)
		}
	}
	return nil
}

// readSmall reads a metadata file relative to the directory fd, refusing links and oversize files.
// The buffer is sized by the file's fstat, so that a metadata file of many
// entries is read without growing it.
func readSmall(dfd int, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	// One byte past the size, to see the end in the same read.
	raw := make([]byte, 0, st.Size+1)
	for {
		if len(raw) == cap(raw) {
			if int64(len(raw)) > limit {
				return nil, fmt.Errorf("larger than %d bytes", limit)
			}
			raw = slices.Grow(raw, 4096)
		}
		n, err := unix.Read(fd, raw[len(raw):cap(raw)])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case n == 0:
			if int64(len(raw)) > limit {
				return nil, fmt.Errorf("larger than %d bytes", limit)
			}
			return raw, nil
		}
		raw = raw[:len(raw)+n]
	}
}

// openPayload opens a payload file beneath the artifact directory without
// following any link, checks its type, mode and size (it is mapped on first use: Data).
func openPayload(dfd int, dir string, e artifact.FileEntry) (*LeaseFile, error) {
	fd, err := openBeneath(dfd, e.Path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	f := os.NewFile(uintptr(fd), e.Path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkPayloadStat(&st, e); err != nil {
		f.Close()
		return nil, err
	}
	return &LeaseFile{Path: e.Path, Abs: filepath.Join(dir, e.Path), File: f, Entry: e}, nil
}

// openBeneath opens name, a relative path, beneath the directory open at
// dfd without following any link (where openat2 is missing, only the
// last component's).
func openBeneath(dfd int, name string, flags int) (int, error) {
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return unix.Openat(dfd, name, flags, 0)
	}
	return fd, err
}

// checkPayloadStat checks a payload file's type, mode and size against its index entry.
func checkPayloadStat(st *unix.Stat_t, e artifact.FileEntry) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("not a regular file")
	case st.Size != e.Size:
		return fmt.Errorf("size %d, index says %d", st.Size, e.Size)
	case os.FileMode(st.Mode).Perm() != fileHardened:
		return fmt.Errorf("mode %o is not the hardened %o", st.Mode&0o7777, fileHardened)
	}
	return nil
}

// checkTensorTable re-reads a safetensors header from f, the payload file
// e (a read of the header alone, not a mapping), and compares it with the
// index: names, dtypes, shapes and offsets; f is not read for a file that
// is not safetensors. A header that is wrong is an *InvalidError;
// a read that fails is returned as it is.
func checkTensorTable(f *os.File, e artifact.FileEntry) error {
	if !artifact.IsSafetensors(e.Path) {
		if len(e.Tensors) != 0 || e.DataStart != 0 {
			return &InvalidError{File: e.Path, Reason: "tensors indexed in a file that is not safetensors"}
		}
		return nil
	}
	h, err := artifact.ReadHeader(f, e.Size)
	var fe *artifact.FormatError
	if errors.As(err, &fe) {
		return &InvalidError{File: e.Path, Reason: err.Error()}
	}
	if err != nil {
		return err
	}
	if h.DataStart() != e.DataStart || len(h.Tensors) != len(e.Tensors) {
		return &InvalidError{File: e.Path, Reason: "header does not match the index"}
	}
	for i, t := range h.Tensors {
		x := e.Tensors[i]
		if t.Name != x.Name || t.DType != x.DType || !slices.Equal(t.Shape, x.Shape) ||
			h.DataStart()+t.Begin != x.Offset || t.End-t.Begin != x.Length {
			return &InvalidError{File: e.Path, Tensor: t.Name, Reason: "header entry does not match the index"}
		}
	}
	return nil
}
