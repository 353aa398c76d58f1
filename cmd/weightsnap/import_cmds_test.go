package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact/synth"
)

func TestImportCommandWarmHitReadsNoSource(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 2, DType: "F16", Seed: 9}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // past the fingerprint cache's racy window
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, nil, 0o644)
	args := []string{"--root", filepath.Join(base, "root"), "--config", cfg, "import", src, "--revision", strings.Repeat("cd", 20), "--json"}
	var runs [2]importResult
	for i := range runs {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("import %d: %v", i, err)
		}
		if err := json.Unmarshal([]byte(out), &runs[i]); err != nil {
			t.Fatalf("import %d printed %q: %v", i, out, err)
		}
	}
	if !runs[0].Built || runs[1].Built || runs[0].Digest != runs[1].Digest {
		t.Fatalf("imports: %+v, want one build then a hit on the same digest", runs)
	}
	if out, err := runCLI(t, append(args[:4], "import", src, "--revision", "main")...); err == nil {
		t.Fatalf("a branch name was accepted as revision: %s", out)
	}
}
