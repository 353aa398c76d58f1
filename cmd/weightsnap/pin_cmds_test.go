package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
)

// TestPinLsEvict: a pinned artifact is shown by ls --use, refused by rm,
// kept by gc --evict, which takes the others least recently used first
// (--dry-run takes nothing, and exits 5 for a target the pin keeps it
// from), and evicted once unpinned.
func TestPinLsEvict(t *testing.T) {
	base := t.TempDir()
	root := []string{"--config", "", "--root", filepath.Join(base, "root")}
	ws := func(args ...string) (string, error) { return runCLI(t, append(root, args...)...) }
	var ids []string
	for i := range 3 {
		src := filepath.Join(base, fmt.Sprint("m", i))
		if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: uint64(40 + i)}); err != nil {
			t.Fatal(err)
		}
		out, err := ws("import", src, "--revision", strings.Repeat("cd", 20), "--repository", fmt.Sprint("org/m", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimPrefix(strings.TrimSpace(out), "sha256:"))
	}
	if _, err := ws("pin", ids[0][:12], "--reason", "golden"); err != nil {
		t.Fatal(err)
	}
	out, err := ws("ls", "--use")
	if err != nil || !strings.Contains(out, `cli ("golden")`) || !strings.Contains(out, "FREES") || strings.Index(out, ids[1][:12]) > strings.Index(out, ids[0][:12]) {
		t.Fatalf("ls --use: %v\n%s", err, out)
	}
	if _, err := ws("rm", ids[0][:12]); exitcode.Of(err) != 5 || !strings.Contains(err.Error(), "pinned by cli") {
		t.Fatalf("rm of a pinned artifact: %v", err)
	}
	// The pinned one holds the rest: the target cannot be met, exit 5.
	out, err = ws("gc", "--evict", "--dry-run", "--to", "0")
	if exitcode.Of(err) != 5 || !strings.Contains(err.Error(), ids[0][:12]) || strings.Count(out, "would evict") != 2 || !strings.Contains(out, "held: "+ids[0]) {
		t.Fatalf("gc --evict --dry-run: %v\n%s", err, out)
	}
	out, err = ws("gc", "--evict", "--to", "1500KiB")
	if err != nil || !strings.Contains(out, "evicted "+ids[1]) || !strings.Contains(out, "evicted "+ids[2]) || strings.Contains(out, "evicted "+ids[0]) {
		t.Fatalf("gc --evict --to 1500KiB: %v\n%s", err, out)
	}
	if _, err := ws("unpin", ids[0][:12]); err != nil {
		t.Fatal(err)
	}
	if out, err = ws("gc", "--evict", "--to", "0"); err != nil || !strings.Contains(out, "evicted "+ids[0]) {
		t.Fatalf("gc --evict after unpin: %v\n%s", err, out)
	}
}

// TestPrefetchSyncUsesTheRoot: prefetch sync resolves into --root (an
// identity alone, from the store: nothing to fetch) and pins it as its file.
func TestPrefetchSyncUsesTheRoot(t *testing.T) {
	base := t.TempDir()
	root := []string{"--config", "", "--root", filepath.Join(base, "root")}
	src := filepath.Join(base, "m")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: 77}); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, append(root, "import", src, "--revision", strings.Repeat("cd", 20))...)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	dir := filepath.Join(base, "prefetch.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.toml"), []byte(fmt.Sprintf("[[artifact]]\nidentity = %q\npin = true\n", id)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, append(root, "prefetch", "sync", dir, "--timeout", "30s")...); err != nil || !strings.Contains(out, "ready") {
		t.Fatalf("prefetch sync: %v\n%s", err, out)
	}
	if out, err := runCLI(t, append(root, "ls", "--use")...); err != nil || !strings.Contains(out, "prefetch:m.toml") {
		t.Fatalf("ls --use after prefetch sync: %v\n%s", err, out)
	}
}
