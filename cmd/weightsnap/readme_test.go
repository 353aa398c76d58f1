package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/pointer"
)

// TestReadmeSecondHour: the README and the guides in docs/ answer what a
// new user asks in the second hour, in the words the code uses: where an
// artifact's files are, how the CLI finds weightsnapd, plain HTTP per
// host, what the peer's token file holds, how to get the tools (the
// versions test/e2e/deps pins) and what a weight image run without
// weightsnap shows.
func TestReadmeSecondHour(t *testing.T) {
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") } // line breaks are the page's own
	pages := map[string]string{}
	for _, page := range []string{"README.md", "docs/cli.md", "docs/containers.md", "docs/peer.md", "docs/registries.md"} {
		raw, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		pages[page] = flat(string(raw))
	}
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
	for _, tc := range []struct{ item, page, want string }{
		{"the loader", "docs/cli.md", "weightsnap inspect --json 7a1b70 | jq -r .path"},
		{"the loader", "docs/cli.md", "`inspect --json` and `ls --json` as `path`"},
		{"finding the daemon", "README.md", "$" + config.EnvPath},
		{"finding the daemon", "README.md", "`--control-address SOCKET`"},
		{"finding the daemon", "docs/cli.md", "$" + config.EnvPath},
		{"finding the daemon", "docs/cli.md", "`--control-address SOCKET`"},
		{"plain HTTP per host", "docs/registries.md", `plain_http = ["127.0.0.1:5500"]`},
		{"plain HTTP per host", "docs/registries.md", "--plain-http=127.0.0.1:5500"},
		{"plain HTTP per host", "docs/registries.md", "server = \"http://127.0.0.1:5500\"\n```\n(the server of a hosts.toml"},
		{"the peer token", "docs/peer.md", "The token file holds one line, the token"},
		{"the peer token", "docs/peer.md", "openssl rand -hex 32 >/etc/weightsnap/peer.token"},
		{"the tools", "README.md", "bin=$(test/e2e/deps -q)"},
		{"the tools", "README.md", "containerd " + pin("containerd")},
		{"the tools", "README.md", "nerdctl " + pin("nerdctl")},
		{"the tools", "README.md", "It needs containerd " + minimum[1] + " or newer"},
		{"a weight image without weightsnap", "docs/containers.md", "/models/llama/" + pointer.NoticeName},
		{"the exit codes", "docs/cli.md", "| 4 | invalid data | a corrupt safetensors file"},
	} {
		if !strings.Contains(pages[tc.page], flat(tc.want)) {
			t.Errorf("%s: %s does not say %q", tc.item, tc.page, tc.want)
		}
	}
}
