// Package ioerr classifies the filesystem failures that every writer of the
// module treats alike.
package ioerr

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Classify types running out of space or quota (ENOSPC, EDQUOT): as
// full(err) when full is given, otherwise as err classed
// errdefs.ErrResourceExhausted. A nil error, any other error, and one
// already classed as exhausted resources are returned as they are.
func Classify(err error, full func(error) error) error {
	if err == nil || !(errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) || errdefs.IsResourceExhausted(err) {
		return err
	}
	if full != nil {
		return full(err)
	}
	return fmt.Errorf("%w: %w", errdefs.ErrResourceExhausted, err)
}
