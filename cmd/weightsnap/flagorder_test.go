package main

import (
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
)

// TestMisplacedFlag: a subcommand's flag before the subcommand is named
// with where it goes; global flags there, and every flag after the
// subcommand, are left to cobra.
func TestMisplacedFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--plain-http", "pull", "host/r:t"}, "flag --plain-http belongs to the subcommand: weightsnap pull --plain-http ..."},
		{[]string{"--root", "/r", "--hosts-dir", "/etc/certs.d", "pull", "host/r:t"}, "flag --hosts-dir belongs to the subcommand: weightsnap pull --hosts-dir ..."},
		{[]string{"--insecure", "image", "build", "--base", "b"}, "flag --insecure belongs to the subcommand: weightsnap image build --insecure ..."},
		{[]string{"--root", "/r", "--config", "", "pull", "--plain-http", "host/r:t"}, ""},
		{[]string{"--root=/r", "ls", "--json"}, ""},
		{[]string{"--bogus", "ls"}, ""},
		{[]string{"pull", "host/r:t"}, ""},
	} {
		err := misplacedFlag(newRoot(&app{}), tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || exitcode.Of(err) != exitcode.BadInput):
			t.Errorf("%v: %v, want exit 2 saying %q", tc.args, err, tc.want)
		}
	}
}
