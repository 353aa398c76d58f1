package ioerr

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

type fullError struct{ err error }

func (e *fullError) Error() string   { return "full: " + e.err.Error() }
func (e *fullError) Unwrap() []error { return []error{errdefs.ErrResourceExhausted, e.err} }

func TestClassify(t *testing.T) {
	enospc := &fs.PathError{Op: "write", Path: "f", Err: unix.ENOSPC}
	classed := fmt.Errorf("%w: %w", errdefs.ErrResourceExhausted, enospc)
	other := &fs.PathError{Op: "write", Path: "f", Err: unix.EIO}
	full := func(err error) error { return &fullError{err} }
	for _, tc := range []struct {
		name      string
		err       error
		full      func(error) error
		exhausted bool
		same      bool // returned as it is
		typed     bool // returned as full's type
	}{
		{name: "nil", same: true},
		{name: "other", err: other, same: true},
		{name: "other with full", err: other, full: full, same: true},
		{name: "enospc", err: enospc, exhausted: true},
		{name: "edquot", err: fmt.Errorf("sync: %w", unix.EDQUOT), exhausted: true},
		{name: "enospc with full", err: enospc, full: full, exhausted: true, typed: true},
		{name: "already classed", err: classed, full: full, exhausted: true, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.err, tc.full)
			if errdefs.IsResourceExhausted(got) != tc.exhausted {
				t.Errorf("Classify(%v) = %v: exhausted %v, want %v", tc.err, got, !tc.exhausted, tc.exhausted)
			}
			if same := got == tc.err; same != tc.same {
				t.Errorf("Classify(%v) = %v: returned as it is %v, want %v", tc.err, got, same, tc.same)
			}
			var fe *fullError
			if typed := errors.As(got, &fe); typed != tc.typed {
				t.Errorf("Classify(%v) = %v: full's type %v, want %v", tc.err, got, typed, tc.typed)
			}
			if tc.err != nil && !errors.Is(got, tc.err) {
				t.Errorf("Classify(%v) = %v: the cause is lost", tc.err, got)
			}
		})
	}
}
