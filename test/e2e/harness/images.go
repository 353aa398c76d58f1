package harness

import (
	"archive/tar"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// busyboxApplets are linked to /bin/busybox in the test image.
var busyboxApplets = []string{
	"sh", "ash", "ls", "cat", "echo", "sleep", "true", "false", "env", "ps", "mkdir", "rm", "cp", "mv",
	"ln", "wc", "head", "tail", "grep", "sed", "awk", "sha256sum", "md5sum", "stat", "mount", "umount",
	"id", "hostname", "printf", "test", "[", "touch", "find", "du", "df", "dd", "sync", "uname", "kill",
	"date", "cmp", "diff", "tee", "xargs", "sort", "uniq", "tr", "cut", "od", "hexdump", "nc", "wget",
	"readlink", "realpath", "basename", "dirname", "seq", "chmod", "chown", "ip", "ping", "vi", "less",
}

// PushBusybox pushes a one-layer image holding Debian's static /bin/busybox (with applet symlinks in
// /bin and PATH=/bin) to reg as busybox:latest and returns its reference.
func PushBusybox(t testing.TB, reg *Registry) string {
	t.Helper()
	ref := reg.Ref("busybox:latest")
	pushBusybox(t, nil, ref)
	return ref
}

// PushBusyboxIn is PushBusybox run inside ns, to ref (a registry that ns's processes reach, such as
// one StartRegistryIn started there).
func PushBusyboxIn(t testing.TB, ns *NS, ref string) {
	t.Helper()
	pushBusybox(t, ns, ref)
}

// pushBusybox pushes the busybox image to ref with crane, inside ns unless it is nil.
func pushBusybox(t testing.TB, ns *NS, ref string) {
	t.Helper()
	tools := Peers(t)
	dir := TempDir(t)
	layer := filepath.Join(dir, "layer.tar")
	if err := writeBusyboxLayer(layer, tools.Busybox); err != nil {
		t.Fatalf("busybox layer: %v", err)
	}
	crane := []string{tools.Crane}
	if ns != nil {
		crane = []string{tools.IP, "netns", "exec", ns.Name, tools.Crane}
	}
	env := tools.pathEnv()
	mustRun(t, env, dir, append(crane, "append", "--insecure", "--oci-empty-base", "-f", layer, "-t", ref)...)
	mustRun(t, env, dir, append(crane, "mutate", "--insecure", ref, "--set-platform", "linux/"+runtime.GOARCH,
		"--env", "PATH=/bin", "--cmd", "/bin/sh", "-t", ref)...)
}

// PushPause pushes the CRI sandbox image (busybox whose entrypoint sleeps forever) to reg as
// pause:3.10, the image StartContainerd pins when given reg, and returns its reference.
func PushPause(t testing.TB, reg *Registry) string {
	t.Helper()
	tools := Peers(t)
	base := PushBusybox(t, reg)
	ref := reg.Ref("pause:3.10")
	mustRun(t, tools.pathEnv(), "", tools.Crane, "mutate", "--insecure", base,
		"--entrypoint", "/bin/sleep", "--cmd", "2147483647", "-t", ref)
	return ref
}

// writeBusyboxLayer writes an uncompressed layer tar: the usual top directories, /bin/busybox, its
// applet links and minimal /etc/passwd and /etc/group.
func writeBusyboxLayer(path, busybox string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	mtime := time.Unix(0, 0)
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sys", "tmp", "var", "w"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: mtime}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: mtime}); err != nil {
		return err
	}
	if _, err := tw.Write(bb); err != nil {
		return err
	}
	for _, a := range busyboxApplets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, file := range [][2]string{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
	} {
		name, body := file[0], file[1]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
