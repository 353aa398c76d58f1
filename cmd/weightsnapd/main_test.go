package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
)

// TestConfigDefault: `weightsnapd config default` prints the whole file,
// which parses back to the defaults.
func TestConfigDefault(t *testing.T) {
	var out bytes.Buffer
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"config", "default"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got, err := config.Parse("printed", out.Bytes())
	if err != nil || !reflect.DeepEqual(got, config.Default()) {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestConfigCheck: `weightsnapd config check` accepts a good file and
// refuses a bad one as invalid input.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"[snapshotter]\nmode = \"preferred\"\n", true},
		{"[snapshotter]\nmode = \"sometimes\"\n", false},
		{"[bogus]\n", false},
	} {
		p := filepath.Join(t.TempDir(), "config.toml")
		os.WriteFile(p, []byte(tc.file), 0o644)
		cmd := newRoot()
		cmd.SetOut(io.Discard)
		cmd.SetArgs([]string{"--config", p, "config", "check"})
		err := cmd.Execute()
		if (err == nil) != tc.ok || (err != nil && !errdefs.IsInvalidArgument(err)) {
			t.Fatalf("%q: %v", tc.file, err)
		}
	}
}
