//go:build !faults

package store

// faultPoint marks a step the crash harness can interrupt; without the
// "faults" build tag it does nothing.
func faultPoint(string) {}

// syncSkipped is the test switch that leaves out a directory sync; without
// the "faults" build tag no sync is ever left out.
func syncSkipped(string) bool { return false }
