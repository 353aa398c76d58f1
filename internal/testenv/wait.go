package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond until it is true, failing the test with the message
// (format and args, as for Fatalf) when it is not within timeout. Call it
// from the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	err := Wait(timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf(format+" (not within %v)", append(args, timeout)...)
	}
}

var errNotYet = errors.New("condition not met")

// Wait calls try until it returns nil, returns an error marked with Final,
// or timeout passes. It returns nil once try succeeds, the final error, or
// the last error try returned, saying it timed out. The pause between two
// tries starts at a few milliseconds and grows to a hundredth of the
// timeout (a quarter of a second at most), so a short wait reacts fast and
// a long one does not busy the machine.
func Wait(timeout time.Duration, try func() error) error {
	return wait(timeout, 5*time.Millisecond, min(max(timeout/100, 10*time.Millisecond), 250*time.Millisecond), try)
}

// WaitEvery is Wait with a fixed pause between two tries, for a wait that
// must notice the moment something happens (a transfer reaching a size).
func WaitEvery(timeout, every time.Duration, try func() error) error {
	return wait(timeout, every, every, try)
}

func wait(timeout, pause, most time.Duration, try func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := try()
		if err == nil {
			return nil
		}
		var f finalError
		if errors.As(err, &f) {
			return f.err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		time.Sleep(min(pause, time.Until(deadline)))
		pause = min(2*pause, most)
	}
}

// Final marks err as ending a Wait at once: what it waits for cannot come
// (the process that should answer exited).
func Final(err error) error { return finalError{err} }

type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }
func (f finalError) Unwrap() error { return f.err }
