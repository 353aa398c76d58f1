package crash

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
)

// TestWeakLookupNeverLeasesAfterStrongDeny interleaves two processes on a
// corrupted artifact: a manifest_and_metadata lookup paused right after its
// validation passed, and a full_checksum lookup that denies the artifact
// meanwhile. The weaker one must not return a lease.
func TestWeakLookupNeverLeasesAfterStrongDeny(t *testing.T) {
	s := storetest.NewSource(t, 1<<20, 2, 42)
	root := filepath.Join(t.TempDir(), "store")
	s.Publish(t, root)
	storetest.Corrupt(t, root, s.ID.Hex())

	gate := t.TempDir()
	weak := exec.Command(child(t), "lookup-metadata", root, s.Dir)
	weak.Env = append(os.Environ(), "WEIGHTSNAP_FAULT=lookup.validated:wait", "WEIGHTSNAP_FAULT_DIR="+gate)
	var weakOut strings.Builder
	weak.Stdout = &weakOut
	if err := weak.Start(); err != nil {
		t.Fatal(err)
	}
	defer weak.Process.Kill()
	waitFor(t, filepath.Join(gate, "lookup.validated.reached"))

	strongOut, killed := runChild(t, "", "deny", root, s.Dir)
	if killed || !strings.Contains(strongOut, "InvalidError") {
		t.Fatalf("the full_checksum lookup did not find the corruption: %s", strongOut)
	}
	if err := os.WriteFile(filepath.Join(gate, "lookup.validated.go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	weak.Wait()
	got := weakOut.String()
	if strings.HasPrefix(got, "ok lease") || !strings.Contains(got, "DeniedError") {
		t.Fatalf("the weaker lookup after the stronger denied: %q, want a DeniedError", got)
	}
	// And a weak lookup that starts after the deny misses at once.
	if out, _ := runChild(t, "", "lookup-metadata", root, s.Dir); !strings.Contains(out, "DeniedError") {
		t.Fatalf("a later weak lookup: %q, want a DeniedError", out)
	}
}

func waitFor(t *testing.T, path string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, "%s never appeared", path)
}
