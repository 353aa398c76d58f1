package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/control"
)

// TestPublishCompileCache: weightsnap publish --kind compile-cache
// publishes a cache directory under the identity its flags make; --dry-run
// computes the same ID without the directory (what a later start fetches),
// and says whether the store holds it; the flags' mistakes are bad input
// named, a --for the store does not hold is not found.
func TestPublishCompileCache(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 256 << 10, Shards: 1, DType: "F16", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	common := []string{"--root", root, "--config", ""}
	out, err := runCLI(t, append(common, "import", src, "--revision", strings.Repeat("ab", 20), "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var imp importResult
	if err := json.Unmarshal([]byte(out), &imp); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(base, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "kernels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "kernels", "k0.bin"), []byte("compiled"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := []string{"--kind", "compile-cache", "--for", imp.ID.Hex()[:12], "--engine", "standin", "--engine-version", "1.0", "--gpu-arch", "none", "--tp", "2", "--key", "cuda=12.8"}
	publish := func(extra ...string) (control.PublishResult, error) {
		var res control.PublishResult
		out, err := runCLI(t, append(append(append(common, "publish"), extra...), append(keys, "--json")...)...)
		if err == nil {
			if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
				t.Fatalf("publish printed %q: %v", out, jerr)
			}
		}
		return res, err
	}
	before, err := publish("--dry-run")
	if err != nil || before.Present || before.Report != nil {
		t.Fatalf("dry run before: %+v %v", before, err)
	}
	done, err := publish(cache)
	if err != nil || done.ID != before.ID || !done.Present {
		t.Fatalf("publish: %+v %v, want %s", done, err, before.ID)
	}
	var rep struct {
		Kind, Outcome, Source string
	}
	if err := json.Unmarshal(done.Report, &rep); err != nil || rep.Kind != "post_load_publish" || rep.Outcome != "published" || rep.Source != "producer:compile-cache" {
		t.Fatalf("report %s: %v", done.Report, err)
	}
	if c := done.Identity.Cache; c == nil || c.For != imp.ID || c.Engine != "standin" || c.TPSize != 2 || c.PPSize != 1 || c.Keys["cuda"] != "12.8" ||
		done.Identity.Component != artifact.CompileCacheComponent {
		t.Fatalf("identity %+v", done.Identity)
	}
	after, err := publish("--dry-run")
	if err != nil || after.ID != before.ID || !after.Present {
		t.Fatalf("dry run after: %+v %v", after, err)
	}
	again, err := publish(cache)
	if err == nil {
		err = json.Unmarshal(again.Report, &rep)
	}
	if err != nil || again.ID != before.ID || rep.Outcome != "present" {
		t.Fatalf("publish again: %s %v", again.Report, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no kind", []string{"publish", cache, "--for", imp.ID.Hex(), "--engine", "e", "--engine-version", "1", "--gpu-arch", "none"}, exitcode.BadInput, "--kind is missing"},
		{"unknown kind", []string{"publish", cache, "--kind", "weights", "--for", imp.ID.Hex(), "--engine", "e", "--engine-version", "1", "--gpu-arch", "none"}, exitcode.BadInput, `--kind "weights"`},
		{"no engine", []string{"publish", cache, "--kind", "compile-cache", "--for", imp.ID.Hex(), "--engine-version", "1", "--gpu-arch", "none"}, exitcode.BadInput, "--engine is missing"},
		{"no engine version", []string{"publish", cache, "--kind", "compile-cache", "--for", imp.ID.Hex(), "--engine", "e", "--gpu-arch", "none"}, exitcode.BadInput, "--engine-version is missing"},
		{"no gpu arch", []string{"publish", cache, "--kind", "compile-cache", "--for", imp.ID.Hex(), "--engine", "e", "--engine-version", "1"}, exitcode.BadInput, "--gpu-arch is missing"},
		{"no for", []string{"publish", cache, "--kind", "compile-cache", "--engine", "e", "--engine-version", "1", "--gpu-arch", "none"}, exitcode.BadInput, "--for is missing"},
		{"for not in the store", []string{"publish", cache, "--kind", "compile-cache", "--for", strings.Repeat("f", 64), "--engine", "e", "--engine-version", "1", "--gpu-arch", "none"}, exitcode.NotFound, "--for"},
		{"key without a value", append([]string{"publish", cache}, append(keys, "--key", "opt")...), exitcode.BadInput, `--key "opt": want K=V`},
		{"upper-case key", append([]string{"publish", cache}, append(keys, "--key", "OPT=1")...), exitcode.BadInput, `--key "OPT=1"`},
		{"key twice", append([]string{"publish", cache}, append(keys, "--key", "cuda=12.9")...), exitcode.BadInput, "--key cuda is given twice"},
		{"tp 0", append([]string{"publish", cache}, append(keys, "--tp", "0")...), exitcode.BadInput, "--tp and --pp"},
		{"no directory", append([]string{"publish"}, keys...), exitcode.BadInput, "needs the directory"},
		{"missing directory", append([]string{"publish", filepath.Join(base, "absent")}, keys...), exitcode.NotFound, "absent"},
		{"a cache for a cache", []string{"publish", cache, "--kind", "compile-cache", "--for", done.ID.Hex(), "--engine", "e", "--engine-version", "1", "--gpu-arch", "none"}, exitcode.BadInput, "is a compile cache itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(t, append(common, tc.args...)...)
			if err == nil || exitcode.Of(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v (exit %d), want exit %d saying %q", err, exitcode.Of(err), tc.code, tc.says)
			}
		})
	}
}
