// Package store is one domain of immutable artifacts on a local filesystem.
//
// It keeps the locks, builds and their publication, lookup, leases with mmap
// views, validation, deny and quarantine, capacity, removal, cleanup and
// inspection. It removes an artifact when asked (Remove, Evict); which
// artifacts to evict is the eviction policy's (package evict).
package store

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/procs"
)

// ErrMiss is returned by Lookup when no valid artifact is published under an id.
var ErrMiss = fmt.Errorf("artifact not in store: %w", errdefs.ErrNotFound)

// UnsupportedFSError refuses a domain root on a filesystem the store cannot trust.
type UnsupportedFSError struct {
	Root  string
	Type  string
	Magic int64
}

func (e *UnsupportedFSError) Error() string {
	return fmt.Sprintf("store root %s is on %s (statfs magic 0x%x): only ext4, xfs, btrfs and tmpfs are supported", e.Root, e.Type, e.Magic)
}

// Unwrap classifies the error: a root the store cannot be kept at is bad
// input (exit 2), on a filesystem it does not implement.
func (e *UnsupportedFSError) Unwrap() []error {
	return []error{errdefs.ErrInvalidArgument, errdefs.ErrNotImplemented}
}

// InvalidError says an artifact failed validation; the artifact is denied.
type InvalidError struct {
	ID     artifact.ID
	File   string
	Tensor string
	Reason string
}

func (e *InvalidError) Error() string {
	s := "artifact " + e.ID.Short() + " is invalid"
	if e.File != "" {
		s += ": file " + e.File
	}
	if e.Tensor != "" {
		s += ": tensor " + e.Tensor
	}
	return s + ": " + e.Reason
}

// Unwrap classifies the error.
func (e *InvalidError) Unwrap() error { return errdefs.ErrDataLoss }

// CapacityError is a build refused or stopped for lack of space.
type CapacityError struct {
	Limit string // max_artifact_bytes, max_store_bytes, min_free_bytes, ENOSPC, or eviction (it could not free Need)
	Need  int64
	Have  int64
	Err   error // the underlying ENOSPC, if any

	// Checked says the store looked at eviction before refusing (capacity.go):
	// Reclaimable is what evicting every candidate could free, Held what it
	// may not take, Rest what holds the filesystem besides, and Eviction
	// "off" when the policy forbids it.
	Checked     bool
	Artifact    artifact.ID // the artifact refused, when known
	Size        int64       // its payload bytes, when known
	Reclaimable int64
	Held        []Held
	Eviction    string
	Rest        []Holding // what holds the filesystem apart from READY artifacts
}

func (e *CapacityError) Error() string {
	var s string
	switch e.Limit {
	case "ENOSPC":
		s = fmt.Sprintf("store is out of space: %v", e.Err)
	case "min_free_bytes":
		s = fmt.Sprintf("store has no space for the file: it needs %d bytes free (min_free_bytes included), the filesystem has %d", e.Need, e.Have)
	case "eviction":
		s = fmt.Sprintf("store eviction cannot free %d bytes: its candidates free %d", e.Need, e.Have)
	default:
		s = fmt.Sprintf("store capacity: %s would be exceeded: need %d bytes, limit allows %d", e.Limit, e.Need, e.Have)
	}
	if e.Checked {
		s += e.detail()
	}
	return s
}

// Unwrap classifies the error. A nil cause is left out: errgrpc.ToGRPC
// (the CRI's answers) dereferences every error Unwrap lists.
func (e *CapacityError) Unwrap() []error {
	if e.Err == nil {
		return []error{errdefs.ErrResourceExhausted}
	}
	return []error{errdefs.ErrResourceExhausted, e.Err}
}

// noSpace types a filesystem out of space or quota as a capacity failure;
// it is the store's form for ioerr.Classify.
func noSpace(err error) error { return &CapacityError{Limit: "ENOSPC", Err: err} }

// BusyError is a removal refused because the artifact is in use: leased or
// being built. It names the processes that held its lock when it was refused.
type BusyError struct {
	ID      artifact.ID
	What    string       // "lease" or "build"
	Holders []LockHolder // a point-in-time view; empty when the lock went meanwhile
}

func (e *BusyError) Error() string {
	s := fmt.Sprintf("artifact %s has an active %s", e.ID.Short(), e.What)
	for i, h := range e.Holders {
		if i == 0 {
			s += " held by"
		} else {
			s += ","
		}
		s += fmt.Sprintf(" %s with a %s lock", procs.Describe(h.PID), h.Mode)
	}
	return s + ": " + errdefs.ErrFailedPrecondition.Error()
}

// Unwrap classifies the error.
func (e *BusyError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// HeldOnlyBy says whether no process but pid held the lock.
func (e *BusyError) HeldOnlyBy(pid int) bool {
	for _, h := range e.Holders {
		if h.PID != pid {
			return false
		}
	}
	return true
}

// TimeoutError is a coordination wait that ran out; it is retryable.
type TimeoutError struct {
	What string
}

func (e *TimeoutError) Error() string { return "timed out waiting for " + e.What }

// Unwrap classifies the error.
func (e *TimeoutError) Unwrap() error { return errdefs.ErrUnavailable }

// Retryable reports whether a failure may go away on its own.
func (e *TimeoutError) Retryable() bool { return true }

// IsInvalid reports whether err says an artifact was found invalid.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// storageErr is an I/O failure of the store itself (not of an artifact's
// content), classified as retryable unavailability. It never causes an
// artifact to be denied or quarantined. A cause already so classified (a
// storage failure met inside op) keeps its class and is not named twice.
func storageErr(op string, err error) error {
	if errdefs.IsUnavailable(err) {
		return fmt.Errorf("store %s: %w", op, err)
	}
	return fmt.Errorf("store %s: %w: %w", op, err, errdefs.ErrUnavailable)
}

// publicationFailed is a publication that failed after its rename; the
// entry was contained in quarantine.
func publicationFailed(id artifact.ID, cause error) error {
	return fmt.Errorf("PUBLICATION_FAILED: artifact %s: %w (contained in quarantine): %w", id.Short(), cause, errdefs.ErrInternal)
}

// identityCollision is a publication whose identity is already published,
// valid, with different bytes.
func identityCollision(id artifact.ID) error {
	return fmt.Errorf("identity collision: artifact %s is already published with different content: %w", id.Short(), errdefs.ErrConflict)
}

// domainFailed says the domain could persist neither a deny marker nor an
// invalidation mode for an invalid entry; it refuses further work.
func domainFailed(root string, err error) error {
	return fmt.Errorf("store domain %s failed: cannot mark an invalid artifact: %w: %w", root, err, errdefs.ErrInternal)
}

// InterruptedError says a build stopped before it published.
// It was cancelled, or its source may answer later.
// Its temp build stays for the next build of the same identity to reuse or continue.
// Kept is the payload bytes it wrote, verified and synced.
// Its message is Err's.
type InterruptedError struct {
	ID    artifact.ID
	Kept  int64
	Total int64 // 0 when the producer does not say
	Err   error
}

func (e *InterruptedError) Error() string { return e.Err.Error() }

// Unwrap classifies the error as the producer's failure.
func (e *InterruptedError) Unwrap() error { return e.Err }
