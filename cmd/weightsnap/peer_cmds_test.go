package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/store"
)

func TestPeerArguments(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct{ in, want string }{
		{hex, "sha256:" + hex},
		{"sha256:" + hex, "sha256:" + hex},
		{"staged:llama/snapshots/x", "staged:llama/snapshots/x"},
		{"llama", ""},
		{"sha256:" + hex[:63], ""},
		{"sha256:" + strings.ToUpper(hex), ""},
	} {
		got, err := peerRequest(context.Background(), peer.ClientConfig{}, nil, tc.in)
		if got != tc.want || (err != nil) != (tc.want == "") || (err != nil && exitcode.Of(err) != 2) {
			t.Errorf("peerRequest(%q) = %q, %v", tc.in, got, err)
		}
	}
	if d, err := exportFlag("llama=/nas/llama@" + hex[:40]); err != nil || d != (peer.Export{Name: "llama", Path: "/nas/llama", Revision: hex[:40]}) {
		t.Errorf("exportFlag: %+v %v", d, err)
	}
	if _, err := exportFlag("/nas/llama"); exitcode.Of(err) != 2 {
		t.Errorf("exportFlag without a name: %v", err)
	}
	for _, args := range [][]string{
		{"peer", "fetch", "127.0.0.1:1", "not-a-digest"},
		{"peer", "fetch", "--mode", "udp", "127.0.0.1:1", "sha256:" + hex},
		{"peer", "fetch", "127.0.0.1:1", "sha256:" + hex, "--tensors", "[bad"},
	} {
		_, err := runCLI(t, append([]string{"--root", t.TempDir(), "--config", ""}, args...)...)
		if exitcode.Of(err) != 2 {
			t.Errorf("%v: %v (exit %d), want exit 2", args, err, exitcode.Of(err))
		}
	}
}

// TestPeerFetchByPrefix: peer fetch takes a unique prefix of an identity
// (or manifest digest) the peer lists, as local commands take one of a
// store id; a prefix no peer lists is not found.
func TestPeerFetchByPrefix(t *testing.T) {
	base, addr, imp := servedPeer(t)
	fetch := func(id string) (string, error) {
		return runCLI(t, "--root", filepath.Join(base, "fetched"), "--config", "", "peer", "fetch", addr, id)
	}
	if got, err := fetch(imp.ID.Hex()[:10]); err != nil || strings.TrimSpace(got) != imp.ID.String() {
		t.Fatalf("fetch by prefix: %q, %v; want %s", got, err, imp.ID)
	}
	if _, err := fetch("ffffffffff"); exitcode.Of(err) != exitcode.NotFound {
		t.Fatalf("a prefix no peer lists: %v (exit %d), want not found", err, exitcode.Of(err))
	}
}

// TestPeerLs: peer ls shows each artifact's repository, as ls does, and
// an artifact a resolve of the peer's node looks for as wanted.
func TestPeerLs(t *testing.T) {
	base, addr, imp := servedPeer(t)
	d, err := store.Open(context.Background(), filepath.Join(base, "served"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wanted := artifact.MustParseID("sha256:" + strings.Repeat("ab", 32))
	release, err := d.Want(wanted)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	out, err := runCLI(t, "--config", "", "peer", "ls", addr)
	lines := strings.Split(out, "\n")
	if err != nil || len(lines) < 3 || strings.Fields(lines[0])[1] != "REPOSITORY" ||
		!strings.HasPrefix(lines[1], imp.ID.Short()) || strings.Fields(lines[1])[1] != "org/model" ||
		!strings.HasPrefix(lines[2], wanted.Short()) || !strings.Contains(lines[2], "wanted") {
		t.Fatalf("peer ls: %v\n%s", err, out)
	}
}

// servedPeer imports a model of the repository org/model into a store a
// weight peer serves, and returns the test's directory, the peer's address
// and the import.
func servedPeer(t *testing.T) (base, addr string, imp importResult) {
	t.Helper()
	base = t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 2, DType: "F16", Seed: 11}); err != nil {
		t.Fatal(err)
	}
	served := filepath.Join(base, "served")
	out, err := runCLI(t, "--root", served, "--config", "", "import", src, "--revision", strings.Repeat("cd", 20), "--repository", "org/model", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &imp); err != nil {
		t.Fatal(err)
	}
	d, err := store.Open(context.Background(), served, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := peer.NewServer(d, peer.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Serve(ctx, l)
	return base, l.Addr().String(), imp
}

// TestPeerServeExportAlias: peer serve takes --export, and --staged (its
// first name) as the same repeatable flag.
func TestPeerServeExportAlias(t *testing.T) {
	cmd := newPeerServeCmd(&app{})
	if err := cmd.ParseFlags([]string{"--export", "a=/a", "--staged", "b=/b@r", "--export", "c=/c"}); err != nil {
		t.Fatal(err)
	}
	got, err := cmd.Flags().GetStringArray("export")
	if err != nil || strings.Join(got, " ") != "a=/a b=/b@r c=/c" {
		t.Fatalf("--export = %q, %v", got, err)
	}
	for _, flag := range []string{"--export", "--staged"} {
		_, err := runCLI(t, "--root", t.TempDir(), "--config", "", "peer", "serve", flag, "no-name")
		if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), `--export "no-name"`) {
			t.Errorf("%s without a name: %v (exit %d), want exit 2 naming --export", flag, err, exitcode.Of(err))
		}
	}
}
