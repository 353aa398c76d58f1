package oci

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// DigestMismatchError is a blob whose bytes do not hash to its descriptor's
// digest: the registry, a proxy or the wire corrupted it.
type DigestMismatchError struct {
	What string // the layer's file path, or "manifest", "index layer", ...
	Want string // digest from the descriptor
	Got  string // digest of the bytes received
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s: digest mismatch: descriptor says %s, received bytes hash to %s", e.What, e.Want, e.Got)
}

// Unwrap classifies the error.
func (e *DigestMismatchError) Unwrap() error { return errdefs.ErrDataLoss }

// IndexMismatchError says the index layer of a pulled artifact disagrees with
// what the store computed from the pulled bytes (or with the manifest).
type IndexMismatchError struct {
	Path   string // payload file, "" for the index as a whole
	Tensor string
	Field  string
	Want   string // from the pulled index layer
	Got    string // computed
}

func (e *IndexMismatchError) Error() string {
	s := "pulled index layer disagrees with the pulled bytes"
	if e.Path != "" {
		s += ": file " + e.Path
	}
	if e.Tensor != "" {
		s += ": tensor " + e.Tensor
	}
	return fmt.Sprintf("%s: %s: index says %q, computed %q", s, e.Field, e.Want, e.Got)
}

// Unwrap classifies the error.
func (e *IndexMismatchError) Unwrap() error { return errdefs.ErrDataLoss }

// ManifestError is a manifest that is not a usable artifact or image.
type ManifestError struct {
	Ref    string
	Reason string
}

func (e *ManifestError) Error() string { return fmt.Sprintf("%s: %s", e.Ref, e.Reason) }

// Unwrap classifies the error.
func (e *ManifestError) Unwrap() error { return errdefs.ErrInvalidArgument }

// UnsupportedError is something valid in OCI that weightsnap does not import,
// such as a compressed or tarred layer.
type UnsupportedError struct {
	Ref    string
	Reason string
}

func (e *UnsupportedError) Error() string { return fmt.Sprintf("%s: %s", e.Ref, e.Reason) }

// Unwrap classifies the error.
func (e *UnsupportedError) Unwrap() error { return errdefs.ErrNotImplemented }

// RangeError is a registry that answered a ranged blob request wrongly.
type RangeError struct {
	Digest string
	Reason string
}

func (e *RangeError) Error() string { return fmt.Sprintf("ranged fetch of %s: %s", e.Digest, e.Reason) }

// Unwrap classifies the error: retryable, the registry misbehaved.
func (e *RangeError) Unwrap() error { return errdefs.ErrUnavailable }
