package oci

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// manifestError is a manifest that is not a usable artifact or image.
func manifestError(ref, reason string) error {
	return fmt.Errorf("%s: %s: %w", ref, reason, errdefs.ErrInvalidArgument)
}

// invalidManifest is manifestError of a cause, which keeps its class when
// it has invalid input's already.
func invalidManifest(ref string, cause error) error {
	if errdefs.IsInvalidArgument(cause) {
		return fmt.Errorf("%s: %w", ref, cause)
	}
	return fmt.Errorf("%s: %w: %w", ref, cause, errdefs.ErrInvalidArgument)
}

// unsupported is something valid in OCI that weightsnap does not import,
// such as a sha512 layer or an artifact without safetensors files.
func unsupported(ref, reason string) error {
	return fmt.Errorf("%s: %s: %w", ref, reason, errdefs.ErrNotImplemented)
}

// indexMismatch says the index layer of a pulled artifact disagrees with
// what the store computed from the pulled bytes (or with the manifest) on
// field of the file at path ("" for the index as a whole).
func indexMismatch(path, field, want, got string) error {
	s := "pulled index layer disagrees with the pulled bytes"
	if path != "" {
		s += ": file " + path
	}
	return fmt.Errorf("%s: %s: index says %q, computed %q: %w", s, field, want, got, errdefs.ErrDataLoss)
}
