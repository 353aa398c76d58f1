package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// TestLsFits: the widest row ls can print (a long repository, producer and
// tp-split layout, a denied state, a large size) fits 120 columns, and the
// creation time is shown to the second.
func TestLsFits(t *testing.T) {
	id := &artifact.Identity{
		Model:    artifact.Model{Repository: "some-organisation/Some-Very-Long-Model-Name-Instruct-2607", Revision: strings.Repeat("0e9e39f2", 5)},
		Layout:   artifact.Layout{Name: "llama-tp:" + strings.Repeat("ab", 32), TPSize: 16, TPRank: 15},
		Producer: artifact.ProducerRef{Name: "tensor-subset-with-a-long-name"},
	}
	rows := []*store.ArtifactInfo{
		{ID: artifact.MustParseID("sha256:" + strings.Repeat("7a", 32)), State: store.StateInvalid, Identity: id, TotalBytes: 999 << 30, Created: "2026-12-01T13:59:33.123456789Z"},
		{ID: artifact.MustParseID("sha256:" + strings.Repeat("1b", 32)), State: store.StateReady, TotalBytes: 1, Created: "2026-12-01T13:59:33Z"},
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREPOSITORY\tREVISION\tPRODUCER\tLAYOUT\tSIZE\tCREATED")
	for _, r := range rows {
		fmt.Fprintln(tw, lsRow(r))
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	for _, want := range []string{"7a7a7a7a7a7a", "some-organisation/S…", "0e9e39f20e9e", "tp15/16", "2026-12-01 13:59:33"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("ls does not show %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), ".123") {
		t.Errorf("ls shows fractions of a second:\n%s", buf.String())
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
	if err := printArtifact(&app{out: &out}, info); err != nil {
		t.Fatal(err)
	}
	files, locks, ok := strings.Cut(out.String(), "Lock holders:\n")
	if !ok || strings.Contains(files, "4242") || !strings.Contains(files, "model.safetensors") || !strings.Contains(locks, "pid 4242") {
		t.Fatalf("inspect:\n%s", out.String())
	}
}
