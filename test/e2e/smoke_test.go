// Package e2e holds weightsnap's end-to-end tests against real peers (see test/e2e/harness).
package e2e

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// TestSmokeContainerRun runs a busybox container from the test registry under the harness's
// containerd, with nerdctl and with ctr.
func TestSmokeContainerRun(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg})
	ref := harness.PushBusybox(t, reg)

	t.Run("nerdctl", func(t *testing.T) {
		out, err := ctd.Nerdctl("run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
			ref, "sh", "-c", "echo hello from $(cat /etc/group | head -1)")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "hello from root:x:0:") {
			t.Fatalf("unexpected output: %q", out)
		}
	})

	t.Run("ctr", func(t *testing.T) {
		if _, err := ctd.Ctr("images", "pull", "--plain-http", "--hosts-dir", ctd.HostsDir, ref); err != nil {
			t.Fatal(err)
		}
		out, err := ctd.Ctr("run", "--rm", ref, "smoke-ctr", "echo", "hello from ctr")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "hello from ctr" {
			t.Fatalf("unexpected output: %q", out)
		}
	})
}

// TestSmokeOrasRoundTrip pushes a file with the oras CLI to the test registry and pulls it back.
func TestSmokeOrasRoundTrip(t *testing.T) {
	tools := harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir := t.TempDir()
	want := make([]byte, 3<<20+17)
	_, _ = rand.Read(want)
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := reg.Ref("smoke/weights:v1")
	if _, err := harness.Run(dir, tools.Oras, "push", "--plain-http", ref,
		"weights.bin:application/vnd.weightsnap.test.v1"); err != nil {
		t.Fatalf("oras push: %v", err)
	}
	pulled := filepath.Join(dir, "pulled")
	if _, err := harness.Run(dir, tools.Oras, "pull", "--plain-http", "-o", pulled, ref); err != nil {
		t.Fatalf("oras pull: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(pulled, "weights.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("pulled %d bytes differ from the %d pushed", len(got), len(want))
	}
}

// TestSmokeNetns joins two network namespaces with a veth pair and pings across it both ways.
func TestSmokeNetns(t *testing.T) {
	tools := harness.Peers(t)
	a := harness.NetNS(t, "a")
	b := harness.NetNS(t, "b")
	harness.Link(t, a, b, "10.233.0.1/24", "10.233.0.2/24")
	if _, err := a.Exec(tools.Ping, "-c1", "-W2", "10.233.0.2"); err != nil {
		t.Fatalf("a -> b: %v", err)
	}
	if _, err := b.Exec(tools.Ping, "-c1", "-W2", "10.233.0.1"); err != nil {
		t.Fatalf("b -> a: %v", err)
	}
}
