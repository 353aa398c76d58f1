package procs

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

const cid = "3f1c0a9e5b7d4c2a8e6f1b3d5a7c9e0f2b4d6a8c0e2f4a6b8d0c2e4f6a8b0c2d"

func TestContainerID(t *testing.T) {
	for _, tc := range []struct{ name, cgroup, want string }{
		{"nerdctl cgroupfs v1", "9:name=systemd:/default/" + cid + "\n4:memory:/default/" + cid + "\n0::/\n", cid},
		{"nerdctl systemd v2", "0::/system.slice/nerdctl-" + cid + ".scope\n", cid},
		{"the e2e harness's namespace, cgroupfs v1", "11:pids:/ws-1a2b3c4d/" + cid + "\n4:memory:/ws-1a2b3c4d/" + cid + "\n", cid},
		{"containerd namespace v2", "0::/k8s.io/" + cid + "\n", cid},
		{"CRI systemd", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0d7f6a1e_3c2b_4a5d_9e8f_1a2b3c4d5e6f.slice/cri-containerd-" + cid + ".scope\n", cid},
		{"CRI cgroupfs", "0::/kubepods/besteffort/pod0d7f6a1e-3c2b-4a5d-9e8f-1a2b3c4d5e6f/" + cid + "\n", cid},
		{"docker systemd", "0::/system.slice/docker-" + cid + ".scope\n", cid},
		{"docker cgroupfs v1", "12:pids:/docker/" + cid + "\n11:memory:/docker/" + cid + "\n", cid},
		{"systemd inside a container", "0::/system.slice/nerdctl-" + cid + ".scope/init.scope\n", cid},
		{"host session", "0::/user.slice/user-1000.slice/session-2.scope\n", ""},
		{"host init", "0::/init.scope\n", ""},
		{"a 32-hex cgroup", "4:memory:/process_api/b6b049984762570313f62dcbd07a7d74\n0::/\n", ""},
		{"upper-case hex", "0::/default/" + strings.ToUpper(cid) + "\n", ""},
		{"root", "0::/\n", ""},
		{"empty", "", ""},
	} {
		if got := ContainerID(tc.cgroup); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestHolderString(t *testing.T) {
	for _, tc := range []struct {
		h    Holder
		want string
	}{
		{Holder{PID: 4242, Command: "sleep", Container: cid}, "pid 4242 (sleep) in container 3f1c0a9e5b7d"},
		{Holder{PID: 17, Command: "python3"}, "pid 17 (python3)"},
		{Holder{PID: 9}, "pid 9"},
	} {
		if got := tc.h.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.h, got, tc.want)
		}
	}
	if got := Join([]Holder{{PID: 1, Command: "a"}, {PID: 2, Command: "b", Container: cid}}); got != "pid 1 (a), pid 2 (b) in container 3f1c0a9e5b7d" {
		t.Errorf("join: %q", got)
	}
	self := Describe(os.Getpid())
	if self.PID != os.Getpid() || self.Command == "" {
		t.Errorf("describe self: %+v", self)
	}
}

func TestParseMaps(t *testing.T) {
	maps := `55d0c7a00000-55d0c7a02000 r--p 00000000 fd:01 1835094                    /usr/bin/sleep
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0
7f1e2d400000-7f1e3d400000 r--s 00000000 00:2e 81                         /models/x.safetensors
7ffc1a5f0000-7ffc1a611000 rw-p 00000000 00:00 0                          [stack]
`
	got := parseMaps(bufio.NewScanner(strings.NewReader(maps)))
	want := []mapping{
		{"55d0c7a00000-55d0c7a02000", Inode{unix.Mkdev(0xfd, 1), 1835094}},
		{"7f1e2d400000-7f1e3d400000", Inode{unix.Mkdev(0, 0x2e), 81}},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parseMaps: %+v, want %+v", got, want)
	}
}

func TestSameView(t *testing.T) {
	view := &mountinfo.Info{Major: 259, Minor: 1, Root: "/var/lib/weightsnap/mounts/0a1b/view", Mountpoint: "/models/m"}
	for _, tc := range []struct {
		name string
		m    mountinfo.Info
		want bool
	}{
		{"the mount itself", *view, true},
		{"a container's bind of it", mountinfo.Info{Major: 259, Minor: 1, Root: view.Root, Mountpoint: "/models"}, true},
		{"a bind of a folder in it", mountinfo.Info{Major: 259, Minor: 1, Root: view.Root + "/tokenizer", Mountpoint: "/tok"}, true},
		{"the filesystem holding it", mountinfo.Info{Major: 259, Minor: 1, Root: "/", Mountpoint: "/"}, false},
		{"a sibling with the same prefix", mountinfo.Info{Major: 259, Minor: 1, Root: view.Root + "2", Mountpoint: "/x"}, false},
		{"another filesystem", mountinfo.Info{Major: 259, Minor: 2, Root: view.Root, Mountpoint: "/models"}, false},
	} {
		if got := sameView(&tc.m, view); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBoundElsewhere(t *testing.T) {
	dir := "/srv/models/m"
	for _, tc := range []struct {
		mountpoint string
		want       bool
	}{
		{"/models", true},             // nerdctl run -v /srv/models/m:/models
		{"/x/srv/models/mm", true},    // another directory
		{"/srv/models/m", false},      // the mount, or a namespace's copy of it
		{"/host/srv/models/m", false}, // propagated below a hostPath /
		{"/rootfs/host/srv/models/m", false},
	} {
		if got := boundElsewhere(&mountinfo.Info{Mountpoint: tc.mountpoint}, dir); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.mountpoint, got, tc.want)
		}
	}
}
