package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

// TestVerifyJSON: verify --json prints one element per artifact checked,
// an empty list for a store that holds none, and a failed check with its
// error and the exit status of the failure.
func TestVerifyJSON(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	empty, root := filepath.Join(base, "empty"), filepath.Join(base, "root")
	if _, err := runCLI(t, "--config", "", "--root", empty, "store", "init"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seed := range uint64(2) {
		src := filepath.Join(base, "src", string(rune('a'+seed)))
		if err := synth.Write(ctx, src, synth.Options{Size: 256 << 10, Shards: 1, DType: "F16", Seed: seed + 1}); err != nil {
			t.Fatal(err)
		}
		out, err := runCLI(t, "--config", "", "--root", root, "import", src, "--revision", strings.Repeat("cd", 20))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	type result struct {
		ID         string `json:"id"`
		Check      string `json:"check"`
		Valid      bool   `json:"valid"`
		Files      int    `json:"files"`
		Bytes      int64  `json:"bytes"`
		Error      string `json:"error"`
		Signatures *struct {
			Status  string            `json:"status"`
			Valid   []string          `json:"valid"`
			Invalid []json.RawMessage `json:"invalid"`
		} `json:"signatures"`
	}
	for _, tc := range []struct {
		name       string
		root       string
		args       []string
		n          int
		check      string
		signatures string // the status of the signatures, "" for none checked
		valid      bool
	}{
		{"an empty store", empty, []string{"--all"}, 0, "", "", true},
		{"one artifact", root, []string{ids[0]}, 1, "manifest_and_metadata", "", true},
		{"one artifact, every byte", root, []string{"--full", ids[1]}, 1, "full_checksum", "", true},
		{"a scrub", root, []string{"--all", "--rate", "0"}, 2, everyDigest, signaturesUnverified, true},
		{"signatures alone", root, []string{"--signatures", "--all"}, 2, "", signaturesUnverified, true},
	} {
		out, err := runCLI(t, append([]string{"--config", "", "--root", tc.root, "verify", "--json"}, tc.args...)...)
		var got []result
		if jerr := json.Unmarshal([]byte(out), &got); err != nil || jerr != nil || got == nil || len(got) != tc.n {
			t.Errorf("%s: %v, %v:\n%s", tc.name, err, jerr, out)
			continue
		}
		for _, r := range got {
			if r.Valid != tc.valid || r.Check != tc.check || (tc.check != "" && (r.Files == 0 || r.Bytes == 0)) ||
				(r.Signatures == nil) != (tc.signatures == "") || (r.Signatures != nil && (r.Signatures.Status != tc.signatures || r.Signatures.Valid == nil || r.Signatures.Invalid == nil)) {
				t.Errorf("%s: %+v", tc.name, r)
			}
		}
	}

	// A payload byte changed: the full check fails with exit 4's class, and
	// the list still says what it found.
	info, err := runCLI(t, "--config", "", "--root", root, "inspect", "--json", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var art struct {
		Path string `json:"path"`
	}
	json.Unmarshal([]byte(info), &art)
	shards, _ := filepath.Glob(filepath.Join(art.Path, "*.safetensors"))
	if len(shards) == 0 {
		t.Fatalf("no safetensors file in %s", art.Path)
	}
	f, err := os.OpenFile(shards[0], os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("the store's read-only file cannot be changed here: %v", err)
	}
	fi, _ := f.Stat()
	f.WriteAt([]byte{0xff, 0xee}, fi.Size()-2)
	f.Close()
	out, err := runCLI(t, "--config", "", "--root", root, "verify", "--json", "--full", ids[0])
	var got []result
	if !errdefs.IsDataLoss(err) || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0].Valid || !strings.Contains(got[0].Error, "mismatch") {
		t.Fatalf("verify --full --json of a changed artifact: %v:\n%s", err, out)
	}
	// In text, the finding is its line of the report, and the failure says
	// only that the artifact failed: the finding is said once.
	out, err = runCLI(t, "--config", "", "--root", root, "verify", ids[0])
	if err == nil || !strings.Contains(out, "already denied") || strings.Contains(err.Error(), "denied") {
		t.Fatalf("verify of a denied artifact: %v:\n%s", err, out)
	}
}
