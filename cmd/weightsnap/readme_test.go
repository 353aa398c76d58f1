package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/pointer"
)

// TestReadmeSecondHour: the README answers what a new user asks in the
// second hour, in the words the code uses: where an artifact's files are,
// how the CLI finds weightsnapd, plain HTTP per host, what the peer's
// token file holds, how to get the tools (the versions test/e2e/deps pins)
// and what a weight image run without weightsnap shows.
func TestReadmeSecondHour(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") } // line breaks are the README's own
	readme := flat(string(raw))
	deps, err := os.ReadFile("../../test/e2e/deps")
	if err != nil {
		t.Fatal(err)
	}
	pin := func(tool string) string {
		m := regexp.MustCompile(`"` + tool + `\|[^|]*\|[^|]*\|v([0-9.]+)"`).FindStringSubmatch(string(deps))
		if m == nil {
			t.Fatalf("test/e2e/deps pins no %s", tool)
		}
		return m[1]
	}
	snippet, err := os.ReadFile("../../contrib/containerd/weightsnap.toml")
	if err != nil {
		t.Fatal(err)
	}
	minimum := regexp.MustCompile(`config version 4: containerd ([0-9.]+) and newer`).FindStringSubmatch(string(snippet))
	if minimum == nil || !strings.Contains(string(snippet), "\nversion = 4\n") {
		t.Fatal("contrib/containerd/weightsnap.toml no longer says which containerd its version 4 needs")
	}
	for _, tc := range []struct{ item, want string }{
		{"the loader", "weightsnap inspect --json 7a1b70 | jq -r .path"},
		{"the loader", "`inspect --json` and `ls --json` as `path`"},
		{"finding the daemon", "$" + config.EnvPath},
		{"finding the daemon", "`--control-address SOCKET`"},
		{"plain HTTP per host", `plain_http = ["127.0.0.1:5500"]`},
		{"plain HTTP per host", "--plain-http=127.0.0.1:5500"},
		{"plain HTTP per host", "server = \"http://127.0.0.1:5500\"\n```\n(the server of a hosts.toml"},
		{"the peer token", "The token file holds one line, the token"},
		{"the peer token", "openssl rand -hex 32 >/etc/weightsnap/peer.token"},
		{"the tools", "bin=$(test/e2e/deps -q)"},
		{"the tools", "containerd " + pin("containerd")},
		{"the tools", "nerdctl " + pin("nerdctl")},
		{"the tools", "It needs containerd " + minimum[1] + " or newer"},
		{"a weight image without weightsnap", "/models/llama/" + pointer.NoticeName},
		{"the exit codes", "| 4 | invalid data | a corrupt safetensors file"},
	} {
		if !strings.Contains(readme, flat(tc.want)) {
			t.Errorf("%s: the README does not say %q", tc.item, tc.want)
		}
	}
}
