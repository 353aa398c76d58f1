// Package store is one storage domain on a local filesystem: locks,
// publication, lookup, leases with mmap views, validation, deny and
// quarantine, capacity, cleanup and inspection.
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
	Limit string // max_artifact_bytes, max_store_bytes, min_free_bytes or ENOSPC
	Need  int64
	Have  int64
	Err   error // the underlying ENOSPC, if any
}

func (e *CapacityError) Error() string {
	if e.Limit == "ENOSPC" {
		return fmt.Sprintf("store is out of space: %v", e.Err)
	}
	if e.Limit == "min_free_bytes" {
		return fmt.Sprintf("store has no space for the file: it needs %d bytes free (min_free_bytes included), the filesystem has %d", e.Need, e.Have)
	}
	return fmt.Sprintf("store capacity: %s would be exceeded: need %d bytes, limit allows %d", e.Limit, e.Need, e.Have)
}

// Unwrap classifies the error.
func (e *CapacityError) Unwrap() []error {
	return []error{errdefs.ErrResourceExhausted, e.Err}
}

// busy says an artifact is in use (leased or being built), naming the
// processes that hold its lock (PID, command, container, lock mode), and
// was left alone.
func busy(id artifact.ID, what string, holders []LockHolder) error {
	s := fmt.Sprintf("artifact %s has an active %s", id.Short(), what)
	for i, h := range holders {
		if i == 0 {
			s += " held by"
		} else {
			s += ","
		}
		s += fmt.Sprintf(" %s with a %s lock", procs.Describe(h.PID), h.Mode)
	}
	return fmt.Errorf("%s: %w", s, errdefs.ErrFailedPrecondition)
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

// InterruptedError says a build stopped before it published (it was
// cancelled, or its source may answer later): its temp build stays, Kept
// of its Total payload bytes written, verified and synced, for the next
// build of the same identity to reuse or continue. Its message is Err's.
type InterruptedError struct {
	ID    artifact.ID
	Kept  int64
	Total int64 // 0 when the producer does not say
	Err   error
}

func (e *InterruptedError) Error() string { return e.Err.Error() }

// Unwrap classifies the error as the producer's failure.
func (e *InterruptedError) Unwrap() error { return e.Err }
