package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

var idRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Lease is a validated artifact held open for reading: its payload files are
// mapped read-only and the shared artifact lock is held until Close, so the
// artifact cannot be removed or replaced while the lease lives.
type Lease struct {
	ID       string // identity hex
	Dir      string
	Ready    *Ready
	Manifest *Manifest
	Index    *artifact.Index

	o       *opened
	lk      *lock
	tensors map[string]tensorRef
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
		return nil, artifact.TensorEntry{}, fmt.Errorf("tensor %q not in artifact %s: %w", name, short(l.ID), errdefs.ErrNotFound)
	}
	return r.file.Data[r.entry.Offset : r.entry.Offset+r.entry.Length], r.entry, nil
}

// Close unmaps the files and releases the shared lock. Views are invalid after it.
func (l *Lease) Close() error {
	if l.o == nil {
		return nil
	}
	l.o.close()
	l.o = nil
	return l.lk.Close()
}

// DeniedError is a lookup of an artifact that was found invalid and denied.
type DeniedError struct {
	ID     string
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("artifact %s is denied: %s", short(e.ID), e.Reason)
}

// Unwrap makes a denied artifact a miss.
func (e *DeniedError) Unwrap() error { return ErrMiss }

// Lookup returns a lease on the valid artifact published under id (an
// identity hex), or ErrMiss. An artifact that fails validation is denied
// before the shared lock is released, and the *InvalidError is returned.
func (d *Domain) Lookup(ctx context.Context, id string, mode ValidationMode) (*Lease, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("artifact id %q is not 64 hex digits: %w", id, errdefs.ErrInvalidArgument)
	}
	if mode == "" {
		mode = d.policy.Validation
	}
	if err := d.checkDenied(id); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.policy.CoordinationTimeout())
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_SH, deadline, "the artifact lock of "+short(id))
	if err != nil {
		return nil, err
	}
	o, err := d.validateDir(id, mode)
	if err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			if derr := d.deny(ctx, id, ie.Error()); derr != nil {
				err = errors.Join(err, derr)
			}
		}
		lk.Close()
		return nil, err
	}
	// A stronger lookup may have denied the artifact while this one validated.
	if err := d.checkDenied(id); err != nil {
		o.close()
		lk.Close()
		return nil, err
	}
	return &Lease{ID: id, Dir: o.dir, Ready: o.ready, Manifest: o.manifest, Index: o.index, o: o, lk: lk}, nil
}

// denyRecord is the content of deny/<id>.
type denyRecord struct {
	Reason string `json:"reason"`
	Time   string `json:"time"`
	PID    int    `json:"pid"`
}

func (d *Domain) checkDenied(id string) error {
	raw, err := os.ReadFile(d.path(dirDeny, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var rec denyRecord
	if err != nil || json.Unmarshal(raw, &rec) != nil {
		rec.Reason = "deny marker present"
	}
	return &DeniedError{ID: id, Reason: rec.Reason}
}

// deny writes the external deny marker deny/<id>.
func (d *Domain) deny(ctx context.Context, id, reason string) error {
	raw, _ := json.Marshal(denyRecord{Reason: reason, Time: time.Now().UTC().Format(time.RFC3339), PID: os.Getpid()})
	if err := writeFileAtomic(d.path(dirDeny, id), raw); err != nil {
		return fmt.Errorf("write deny marker: %w: %w", err, errdefs.ErrUnavailable)
	}
	log.G(ctx).WithField("id", short(id)).WithField("reason", reason).Warn("artifact denied")
	return nil
}

// quarantine moves artifacts/<id> to quarantine/ and clears its deny marker.
// The caller holds the exclusive artifact lock.
func (d *Domain) quarantine(ctx context.Context, id, why string) error {
	dst := d.path(dirQuarantine, fmt.Sprintf("%s.%d", id, time.Now().UnixNano()))
	if err := os.Rename(d.path(dirArtifacts, id), dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("quarantine %s: %w", short(id), err)
	}
	if err := syncDir(d.path(dirArtifacts)); err != nil {
		return err
	}
	if err := syncDir(d.path(dirQuarantine)); err != nil {
		return err
	}
	if err := os.Remove(d.path(dirDeny, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	log.G(ctx).WithField("id", short(id)).WithField("why", why).Info("artifact quarantined")
	return nil
}
