// Package testenv is what every package's tests share about the machine they
// run on: skipping a test that cannot run here (or failing it where CI
// forbids skipping), the root and tool checks, a tmpfs of the test's own,
// and waiting for a condition to become true.
//
// A test that cannot run (no root, a tool missing) skips and says why; with
// WEIGHTSNAP_REQUIRE_ALL=1 (set by .ci/run) every such skip is a failure
// instead, so CI never passes by skipping.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireAllEnv names the variable that turns every Skip into a failure.
const RequireAllEnv = "WEIGHTSNAP_REQUIRE_ALL"

// Skip skips the test with reason, or fails it when WEIGHTSNAP_REQUIRE_ALL=1.
// Use it for every "cannot run here" condition.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireAllEnv) == "1" {
		t.Fatalf("cannot run, and %s=1 forbids skipping: %s", RequireAllEnv, reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (see Skip) unless the test runs as root; what says
// what needs it ("mounting a tmpfs").
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, what+" needs root")
	}
}

// LookPath returns the path of the tool name, skipping (see Skip) when it
// is not on PATH; from says where it comes from ("Debian util-linux").
func LookPath(t testing.TB, name, from string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, "needs "+name+" ("+from+")")
	}
	return p
}

// Tmpfs mounts a tmpfs of size (a mount option, "64m") on a temporary
// directory until the test ends, and returns the directory. It needs root.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	RequireRoot(t, "mounting a tmpfs")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		Skip(t, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
