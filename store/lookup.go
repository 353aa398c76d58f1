package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Lease is a validated artifact held open for reading: its payload files are
// open (each mapped read-only once its bytes are asked for: LeaseFile.Data)
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
}

type tensorRef struct {
	file  *LeaseFile
	entry artifact.TensorEntry
}

// Identity is the leased artifact's identity.
func (l *Lease) Identity() artifact.Identity { return l.Manifest.Identity }

// Files are the payload files, sorted by path.
func (l *Lease) Files() []*LeaseFile { return l.o.files }

// Tensor returns a read-only view of a tensor's bytes: a slice of the mapping.
func (l *Lease) Tensor(name string) ([]byte, artifact.TensorEntry, error) {
	if l.tensors == nil {
		l.tensors = map[string]tensorRef{}
		for _, f := range l.o.files {
			for _, t := range f.Entry.Tensors {
				l.tensors[t.Name] = tensorRef{f, t}
			}
		}
	}
	r, ok := l.tensors[name]
	if !ok {
		return nil, artifact.TensorEntry{}, fmt.Errorf("tensor %q not in artifact %s: %w", name, l.ID.Short(), errdefs.ErrNotFound)
	}
	data, err := r.file.Data()
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
	l, err := d.lookup(ctx, id, mode)
	if err != nil {
		return nil, err
	}
	d.touch(id)
	l.d = d
	return l, nil
}

// lookup is Lookup without a use: a lease that holds the artifact while the
// store records something beside it (a pin) leaves its last use as it was.
func (d *Domain) lookup(ctx context.Context, id artifact.ID, mode ValidationMode) (*Lease, error) {
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
	o, err := d.validateDir(ctx, id, mode)
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
	return &Lease{ID: id, Dir: o.dir, Ready: o.ready, Manifest: o.manifest, Index: o.index, o: o, lk: lk}, nil
}
