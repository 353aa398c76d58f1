package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
)

// TestLsRows: ls shows every repository whole, so two models whose names
// differ only at the end never look the same; the other columns stay
// short (a row without a long repository fits 120 columns), and the
// creation time is shown to the second.
func TestLsRows(t *testing.T) {
	id := func(repo string) *artifact.Identity {
		return &artifact.Identity{
			Model:    artifact.Model{Repository: repo, Revision: strings.Repeat("0e9e39f2", 5)},
			Layout:   artifact.Layout{Name: "llama-tp:" + strings.Repeat("ab", 32), TPSize: 16, TPRank: 15},
			Producer: artifact.ProducerRef{Name: "tensor-subset-with-a-long-name"},
		}
	}
	long := "some-organisation/Some-Very-Long-Model-Name-Instruct-2607"
	rows := []*store.ArtifactInfo{
		{ID: artifact.MustParseID("sha256:" + strings.Repeat("7a", 32)), State: store.StateInvalid, Identity: id(long + "-8B"), TotalBytes: 999 << 30, Created: "2026-12-01T13:59:33.123456789Z"},
		{ID: artifact.MustParseID("sha256:" + strings.Repeat("7b", 32)), State: store.StateReady, Identity: id(long + "-70B"), TotalBytes: 999 << 30, Created: "2026-12-01T13:59:33Z"},
		{ID: artifact.MustParseID("sha256:" + strings.Repeat("1b", 32)), State: store.StateReady, Identity: id("meta-llama/Llama-3.1-8B"), TotalBytes: 1, Created: "2026-12-01T13:59:33Z"},
	}
	var buf bytes.Buffer
	if err := printLs(&buf, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"7a7a7a7a7a7a", long + "-8B ", long + "-70B ", "0e9e39f20e9e", "tp15/16", "2026-12-01 13:59:33"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("ls does not show %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), ".123") {
		t.Errorf("ls shows fractions of a second:\n%s", buf.String())
	}
	buf.Reset()
	if err := printLs(&buf, rows[2:]); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
}

// TestLsColumnsInReadme: the `weightsnap ls` line of the README and of
// docs/cli.md names ls's columns, in order.
func TestLsColumnsInReadme(t *testing.T) {
	var buf bytes.Buffer
	if err := printLs(&buf, nil); err != nil {
		t.Fatal(err)
	}
	want := strings.ToLower(strings.Join(strings.Fields(buf.String()), ", "))
	for _, page := range []string{"README.md", "docs/cli.md"} {
		raw, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, line := range strings.Split(string(raw), "\n") {
			if cmd, comment, ok := strings.Cut(line, "#"); ok && strings.TrimSpace(cmd) == "weightsnap ls" {
				found = true
				if got := strings.TrimSpace(comment); strings.ToLower(got) != want {
					t.Errorf("%s says `weightsnap ls  # %s`, ls prints %s", page, got, want)
				}
			}
		}
		if !found {
			t.Errorf("%s has no `weightsnap ls  # columns` line", page)
		}
	}
}

// TestDomainText: store init and inspect --domain print text, and JSON
// with --json, like every other command.
func TestDomainText(t *testing.T) {
	root := t.TempDir()
	for _, args := range [][]string{{"store", "init", "--validation", "full_checksum"}, {"inspect", "--domain"}} {
		out, err := runCLI(t, append([]string{"--config", "", "--root", root}, args...)...)
		if err != nil || !strings.Contains(out, "Root:        "+root) || !strings.Contains(out, "validation full_checksum") || !strings.Contains(out, "Ready:       0") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		out, err = runCLI(t, append([]string{"--config", "", "--root", root}, append(args, "--json")...)...)
		var rep store.DomainReport
		if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Root != root || rep.Policy.Validation != store.FullChecksum {
			t.Fatalf("%v --json: %v\n%s", args, err, out)
		}
	}
}

// TestInspectLockSection: lock holders are a section of their own, not rows
// of the files table.
func TestInspectLockSection(t *testing.T) {
	var out bytes.Buffer
	info := &store.ArtifactInfo{ID: artifact.MustParseID("sha256:" + strings.Repeat("7a", 32)), State: store.StateReady,
		Files:   []store.FileInfo{{Path: "model.safetensors", Size: 10, SHA256: strings.Repeat("c", 64)}},
		Holders: []store.LockHolder{{PID: 4242, Mode: "READ", Lock: strings.Repeat("7a", 32) + ".artifact.lock"}}}
	if err := printArtifact(&app{out: &out}, info, leasesNone); err != nil {
		t.Fatal(err)
	}
	files, locks, ok := strings.Cut(out.String(), "Lock holders:\n")
	if !ok || strings.Contains(files, "4242") || !strings.Contains(files, "model.safetensors") || !strings.Contains(locks, "pid 4242") {
		t.Fatalf("inspect:\n%s", out.String())
	}
}

// TestArtifactPath: ls --json and inspect (text and JSON) show where an
// artifact's files are, and its files are there.
func TestArtifactPath(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 2, DType: "F16", Seed: 4}); err != nil {
		t.Fatal(err)
	}
	common := []string{"--config", "", "--root", filepath.Join(base, "root")}
	id, err := runCLI(t, append(common, "import", src, "--revision", strings.Repeat("cd", 20))...)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	out, err := runCLI(t, append(common, "ls", "--json")...)
	var list []struct {
		Path string `json:"path"`
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	dir := list[0].Path
	if _, err := os.Stat(filepath.Join(dir, "model-00001-of-00002.safetensors")); err != nil || !filepath.IsAbs(dir) {
		t.Fatalf("ls --json path %q does not hold the artifact's files: %v", dir, err)
	}
	out, err = runCLI(t, append(common, "inspect", id)...)
	if err != nil || !strings.Contains(out, "\nPath:      "+dir+"\n") {
		t.Errorf("inspect does not show the path %s: %v\n%s", dir, err, out)
	}
	out, err = runCLI(t, append(common, "inspect", id, "--json")...)
	if err != nil || !strings.Contains(out, `"path": "`+dir+`"`) {
		t.Errorf("inspect --json does not show the path %s: %v\n%s", dir, err, out)
	}
}
