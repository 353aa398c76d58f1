package harness

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// NS is a network namespace created by NetNS (a test host). Only addresses from 10.233.0.0/16 may
// be given to interfaces inside it.
type NS struct {
	Name  string // ip netns name, ws-<name>-<hex>
	tools *Tools
}

// NetNS creates a network namespace with loopback up (root needed). Teardown kills the processes
// inside it and deletes it (with its interfaces).
func NetNS(t testing.TB, name string) *NS {
	t.Helper()
	testenv.RequireRoot(t, "a network namespace")
	tools := Peers(t)
	ns := &NS{Name: "ws-" + name + "-" + randHex(3), tools: tools}
	mustRun(t, nil, "", tools.IP, "netns", "add", ns.Name)
	tracker.Lock()
	tracker.netns = append(tracker.netns, ns.Name)
	tracker.Unlock()
	t.Cleanup(func() {
		for range 3 {
			out, _ := run(nil, "", tools.IP, "netns", "pids", ns.Name)
			if strings.TrimSpace(out) == "" {
				break
			}
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			waitGone(func() []int { return nsPids(tools, ns.Name) })
		}
		if _, err := run(nil, "", tools.IP, "netns", "delete", ns.Name); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	if _, err := ns.Exec(tools.IP, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	return ns
}

func nsPids(tools *Tools, name string) []int {
	out, _ := run(nil, "", tools.IP, "netns", "pids", name)
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Exec runs argv inside the namespace (ip netns exec) and returns its stdout (the
// error carries stderr).
func (ns *NS) Exec(argv ...string) (string, error) {
	return run(nil, "", append([]string{ns.tools.IP, "netns", "exec", ns.Name}, argv...)...)
}

// Command returns an exec.Cmd that runs argv inside the namespace.
func (ns *NS) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, ns.tools.IP, append([]string{"netns", "exec", ns.Name}, argv...)...)
}

// Start starts a long-running process inside the namespace, like StartProcess (logs in dir).
func (ns *NS) Start(t testing.TB, dir, name string, argv ...string) *Proc {
	t.Helper()
	return StartProcess(t, dir, name, nil, append([]string{ns.tools.IP, "netns", "exec", ns.Name}, argv...)...)
}

// Enter is argv run in the namespace's network only (nsenter --net): unlike Exec and Start (ip netns
// exec, which also makes a mount namespace of its own), the mounts it makes and the mounts it sees
// are the caller's, as a daemon that mounts for the host (weightsnapd) needs.
func (ns *NS) Enter(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + filepath.Join("/run/netns", ns.Name), "--"}, argv...)
}

// Link joins a and b with a veth pair, gives a's end cidrA and b's end cidrB (e.g. "10.233.0.1/24"
// and "10.233.0.2/24") and brings both up. It returns the interface names in a and in b.
func Link(t testing.TB, a, b *NS, cidrA, cidrB string) (ifA, ifB string) {
	t.Helper()
	id := randHex(3)
	ifA, ifB = "wsa"+id, "wsb"+id
	ip := a.tools.IP
	mustRun(t, nil, "", ip, "link", "add", ifA, "netns", a.Name, "type", "veth", "peer", "name", ifB, "netns", b.Name)
	t.Cleanup(func() { _, _ = run(nil, "", ip, "-n", a.Name, "link", "delete", ifA) })
	mustRun(t, nil, "", ip, "-n", a.Name, "addr", "add", cidrA, "dev", ifA)
	mustRun(t, nil, "", ip, "-n", b.Name, "addr", "add", cidrB, "dev", ifB)
	mustRun(t, nil, "", ip, "-n", a.Name, "link", "set", ifA, "up")
	mustRun(t, nil, "", ip, "-n", b.Name, "link", "set", ifB, "up")
	return ifA, ifB
}
