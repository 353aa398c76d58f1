package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Lease is a validated artifact held open for reading: its payload files are
// open (each mapped read-only once its bytes are asked for: LeaseFile.Data),
// or, for a lease from Hold, opened when first asked for (File),
// and the shared artifact lock is held until Close, so the artifact cannot
// be removed or replaced while the lease lives. Manifest and Index may be
// shared with other leases of the artifact: read-only.
type Lease struct {
	ID       artifact.ID
	Dir      string
	Ready    *Ready
	Manifest *Manifest
	Index    *artifact.Index

	o       *opened
	lk      *lock
	tensors map[string]tensorRef
	d       *Domain // records the last use when the lease goes
	dom     *Domain // denies the artifact when a file opened late is invalid
	invalid atomic.Bool
}

type tensorRef struct {
	file  int // in the index's order
	entry artifact.TensorEntry
}

// Identity is the leased artifact's identity.
func (l *Lease) Identity() artifact.Identity { return l.Manifest.Identity }

// Files are the payload files, sorted by path; for a lease from Hold,
// none (nil) until File opened each.
func (l *Lease) Files() []*LeaseFile { return l.o.all() }

// File is the payload file i in the index's order, opened and checked as
// a lookup checks it on the first call for a lease from Hold. A file found
// invalid denies the artifact; the lease stays the caller's to close.
func (l *Lease) File(ctx context.Context, i int) (*LeaseFile, error) {
	if i < 0 || i >= len(l.Index.Files) {
		return nil, fmt.Errorf("file %d of artifact %s of %d files: %w", i, l.ID.Short(), len(l.Index.Files), errdefs.ErrInvalidArgument)
	}
	f, err := l.o.file(i)
	if err != nil {
		return nil, l.found(ctx, err)
	}
	return f, nil
}

// Invalid says whether a payload file this lease opened late was found
// invalid, which denies the artifact: its holder lets the lease go and
// resolves the artifact again.
func (l *Lease) Invalid() bool { return l.invalid.Load() }

// found denies the artifact when err, from opening its files, is an
// *InvalidError, as a lookup that found it would, and returns err.
func (l *Lease) found(ctx context.Context, err error) error {
	var ie *InvalidError
	if !errors.As(err, &ie) {
		return err
	}
	l.invalid.Store(true)
	if derr := l.dom.deny(ctx, l.ID, ie.Error()); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// Tensor returns a read-only view of a tensor's bytes: a slice of the mapping.
func (l *Lease) Tensor(name string) ([]byte, artifact.TensorEntry, error) {
	if l.tensors == nil {
		l.tensors = map[string]tensorRef{}
		for i, f := range l.Index.Files {
			for _, t := range f.Tensors {
				l.tensors[t.Name] = tensorRef{i, t}
			}
		}
	}
	r, ok := l.tensors[name]
	if !ok {
		return nil, artifact.TensorEntry{}, fmt.Errorf("tensor %q not in artifact %s: %w", name, l.ID.Short(), errdefs.ErrNotFound)
	}
	f, err := l.o.file(r.file)
	if err != nil {
		return nil, artifact.TensorEntry{}, fmt.Errorf("tensor %q of artifact %s: %w", name, l.ID.Short(), err)
	}
	data, err := f.Data()
	if err != nil {
		return nil, artifact.TensorEntry{}, fmt.Errorf("tensor %q of artifact %s: %w", name, l.ID.Short(), err)
	}
	return data[r.entry.Offset : r.entry.Offset+r.entry.Length], r.entry, nil
}

// Close unmaps the files and releases the shared lock. Views are invalid after it.
func (l *Lease) Close() error {
	if l.o == nil {
		return nil
	}
	l.o.close()
	l.o = nil
	if l.d != nil {
		l.d.touch(l.ID)
	}
	return l.lk.Close()
}

// DeniedError is a lookup of an artifact that was found invalid and denied.
type DeniedError struct {
	ID     artifact.ID
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("artifact %s is denied: %s", e.ID.Short(), e.Reason)
}

// Unwrap makes a denied artifact a miss.
func (e *DeniedError) Unwrap() error { return ErrMiss }

// Lookup returns a lease on the valid artifact published under id, or
// ErrMiss. An artifact that fails validation is denied before the shared
// lock is released, and the *InvalidError is returned. The lookup and the
// lease's close are uses of the artifact (its last use, for eviction).
func (d *Domain) Lookup(ctx context.Context, id artifact.ID, mode ValidationMode) (*Lease, error) {
	return d.use(d.lookup(ctx, id, mode, false))
}

// Hold is Lookup for a user that keeps the artifact more than it reads it
// (a container's snapshot, a view's link to its files): with
// manifest_and_metadata validation the lease's payload files are opened
// and checked when first asked for (Lease.File), not by
// the lookup. The artifact is held against removal all the same.
func (d *Domain) Hold(ctx context.Context, id artifact.ID, mode ValidationMode) (*Lease, error) {
	return d.use(d.lookup(ctx, id, mode, true))
}

// use records a lookup's lease as a use of its artifact.
func (d *Domain) use(l *Lease, err error) (*Lease, error) {
	if err != nil {
		return nil, err
	}
	d.touch(l.ID)
	l.d = d
	return l, nil
}

// lookup is Lookup (deferred: Hold) without a use: a lease that holds the
// artifact while the store records something beside it (a pin) leaves its
// last use as it was.
func (d *Domain) lookup(ctx context.Context, id artifact.ID, mode ValidationMode, deferred bool) (*Lease, error) {
	if id.IsZero() {
		return nil, fmt.Errorf("no artifact id: %w", errdefs.ErrInvalidArgument)
	}
	if mode == "" {
		mode = d.policy.Validation
	}
	if err := d.failedErr(); err != nil {
		return nil, err
	}
	if err := d.checkDenied(id); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.policy.CoordinationTimeout())
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_SH, deadline, "the artifact lock of "+id.Short())
	if err != nil {
		return nil, err
	}
	var o *opened
	if deferred && mode == ManifestAndMetadata {
		o, err = d.validateMeta(id)
	} else {
		o, err = d.validateDir(ctx, id, mode)
	}
	if err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			return nil, d.invalidate(ctx, id, ie, lk)
		}
		lk.Close()
		return nil, err
	}
	faultPoint("lookup.validated")
	// A stronger lookup may have denied the artifact, or a cooperating reader
	// set the invalidation mode, while this one validated.
	if err := d.recheck(id, o.ino); err != nil {
		o.close()
		lk.Close()
		return nil, err
	}
	return &Lease{ID: id, Dir: o.dir, Ready: o.ready, Manifest: o.manifest, Index: o.index, o: o, lk: lk, dom: d}, nil
}
