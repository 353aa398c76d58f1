//go:build !faults

package store

// faultPoint marks a step the crash harness can interrupt; without the
// "faults" build tag it does nothing.
func faultPoint(string) {}
