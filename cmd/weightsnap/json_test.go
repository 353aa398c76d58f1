package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

// TestEveryReportingCommandHasJSON: every command that reports takes
// --json. The exceptions report nothing a script reads, or report JSON
// another way.
func TestEveryReportingCommandHasJSON(t *testing.T) {
	exempt := map[string]string{
		"weightsnap peer serve": "serves until stopped; it reports nothing",
		"weightsnap resolve":    "--report - prints its JSON report",
		"weightsnap dev synth":  "a development tool: it prints the directory it wrote",
		"weightsnap dev hub":    "a development tool: it prints the directory it wrote",
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		_, skip := exempt[c.CommandPath()]
		if c.Runnable() && !skip && c.Flags().Lookup("json") == nil {
			t.Errorf("%s has no --json", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&app{}))
}

// TestJSONLists: the commands that act on several artifacts print a list
// with --json, an empty one when they did nothing, and exit with the
// failure of those they could not.
func TestJSONLists(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 64 << 10, Shards: 1, DType: "F16", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "--config", "", "--root", root, "import", src, "--revision", strings.Repeat("ab", 20))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	hex := strings.TrimPrefix(id, "sha256:")
	absent := strings.Repeat("cd", 32)
	for _, tc := range []struct {
		name   string
		args   []string
		want   string // the JSON
		failed func(error) bool
	}{
		{"pin", []string{"pin", hex[:12]}, `{"id":"` + hex + `","digest":"` + id + `"}`, nil},
		{"unpin", []string{"unpin", hex[:12]}, `[{"id":"` + hex + `","digest":"` + id + `","dropped":1,"still_pinned":[]}]`, nil},
		{"unpin of an absent artifact", []string{"unpin", absent}, `[]`, errdefs.IsNotFound},
		{"rm of an absent artifact", []string{"rm", absent}, `[]`, errdefs.IsNotFound},
		{"rm", []string{"rm", hex[:12]}, `[{"id":"` + hex + `","digest":"` + id + `"}]`, nil},
	} {
		out, err := runCLI(t, append(append([]string{"--config", "", "--root", root}, tc.args...), "--json")...)
		var got, want any
		jerr := json.Unmarshal([]byte(out), &got)
		json.Unmarshal([]byte(tc.want), &want)
		if jerr != nil || !reflect.DeepEqual(got, want) || (tc.failed == nil) != (err == nil) || (tc.failed != nil && !tc.failed(err)) {
			t.Errorf("%s: %v:\n%s\nwant %s", tc.name, err, out, tc.want)
		}
	}
}
