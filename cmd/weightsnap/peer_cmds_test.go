package main

import (
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/peer"
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
		got, err := peerRequest(tc.in)
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
