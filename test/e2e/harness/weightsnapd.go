package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// WeightsnapdBinary returns the weightsnapd binary: $WEIGHTSNAPD if set, else bin/weightsnapd at the
// module root (built by `make build`, which `make test` and `make e2e` run first). It returns "" when
// neither exists.
func WeightsnapdBinary() string {
	if p := os.Getenv("WEIGHTSNAPD"); p != "" {
		if isExec(p) {
			return p
		}
		return ""
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if p := filepath.Join(dir, "bin", "weightsnapd"); isExec(p) {
				return p
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// StartWeightsnapd starts weightsnapd with args in a fresh harness directory (its working directory;
// logs in weightsnapd.log there) and returns the process; it waits for nothing, since the daemon's
// readiness signal is not defined yet. It skips (see Skip) when the binary is not built.
//
// This is a placeholder until the daemon exists: callers pass the flags (socket, root, containerd
// address) themselves.
func StartWeightsnapd(t testing.TB, args ...string) *Proc {
	t.Helper()
	bin := WeightsnapdBinary()
	if bin == "" {
		Skip(t, "bin/weightsnapd is not built (run make build, or set WEIGHTSNAPD)")
	}
	dir := TempDir(t)
	return StartProcess(t, dir, "weightsnapd", nil, append([]string{bin}, args...)...)
}
