package readme

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// sandboxTimeout bounds the whole walkthrough (make build, containerd, a pull and a run).
const sandboxTimeout = 8 * time.Minute

// TestContainersWalkthrough runs the README's Containers section's proxy setup as written (the
// container prints every weight file with its source sha256), then docs/containers.md's host mount
// block on the same node (the container given the mount with -v prints them too).
func TestContainersWalkthrough(t *testing.T) {
	testenv.RequireRoot(t, "the README walkthrough")
	tools := harness.Peers(t)
	testenv.LookPath(t, "unshare", "Debian util-linux")
	repo, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	setup := shBlock(t, filepath.Join(repo, "README.md"), "## Containers")
	hostMount := shBlock(t, filepath.Join(repo, "docs", "containers.md"), "## Host mounts")

	work := harness.TempDir(t)
	cli := buildCLI(t, repo, work)
	sums := model(t, cli, work)

	// registry.example is 127.0.0.1 on the sandbox's network, where a distribution registry serves
	// plain HTTP on port 80.
	ns := harness.NetNS(t, "readme")
	data := filepath.Join(work, "registry")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.StartRegistryIn(t, ns, "127.0.0.1:80", data)
	if out, err := ns.Exec(cli, "--root", filepath.Join(work, "src"), "--config", "", "push", "--plain-http",
		sums.id, "127.0.0.1:80/models/llama:8b"); err != nil {
		t.Fatalf("push the model: %v\n%s", err, out)
	}
	// The README's base is Docker Hub's busybox, which this machine cannot reach: the image is built
	// over the harness's busybox, pushed to the same registry.
	harness.PushBusyboxIn(t, ns, "127.0.0.1:80/library/busybox:latest")

	// What a node has before the README starts: the registry's name, its host directory (plain
	// HTTP; weightsnapd and nerdctl read containerd's certs.d), and the image the README runs, made
	// as the README says (`weightsnap image build ... -t registry.example/apps/llama:8b`).
	prepare := fmt.Sprintf(`echo '127.0.0.1 registry.example' >>/etc/hosts
mkdir -p /etc/containerd/certs.d/registry.example
cat >/etc/containerd/certs.d/registry.example/hosts.toml <<'TOML'
server = "http://registry.example"

[host."http://registry.example"]
  capabilities = ["pull", "resolve"]
TOML
%s --root %s --config '' image build --plain-http --base registry.example/library/busybox:latest \
	--weights registry.example/models/llama:8b --at /models/llama -t registry.example/apps/llama:8b
`, cli, filepath.Join(work, "build"))

	// The host mount block's placeholders: any image (the busybox base) and the artifact's id prefix.
	hostMount = substitute(t, hostMount, map[string]string{
		"IMAGE":  "registry.example/library/busybox:latest",
		"7a1b70": strings.TrimPrefix(sums.id, "sha256:")[:6],
	})

	outs := runSandbox(t, ns, tools, repo, work, prepare, append(setup, hostMount...))
	sums.printed(t, "/models/llama/", outs[len(setup)-1])
	mounts := outs[len(setup):]
	sums.printed(t, "/models/", mounts[1])
	if !strings.Contains(mounts[2], "/srv/models/llama") || !strings.Contains(mounts[3], "/srv/models/llama") {
		t.Errorf("weightsnap mount and inspect do not list the mount /srv/models/llama:\n%s\n%s", mounts[2], mounts[3])
	}
}

// substitute replaces a block's placeholders in cmds (each one must be there, so an edit of the
// block that drops one is noticed).
func substitute(t *testing.T, cmds []string, placeholders map[string]string) []string {
	t.Helper()
	joined := strings.Join(cmds, "\n")
	for word := range placeholders {
		if !strings.Contains(joined, word) {
			t.Fatalf("the block no longer has the placeholder %q:\n%s", word, joined)
		}
	}
	out := make([]string, len(cmds))
	for i, c := range cmds {
		for word, value := range placeholders {
			c = strings.ReplaceAll(c, word, value)
		}
		out[i] = c
	}
	return out
}

// shBlock returns the commands of the first ```sh block after the line starting with heading in the
// Markdown file at path: one per line, continuation lines (ending in \) joined, blank and comment lines dropped.
func shBlock(t *testing.T, path, heading string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	var cur strings.Builder
	state := 0 // 0: before the heading, 1: before the fence, 2: in the block
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && strings.HasPrefix(strings.TrimSpace(line), heading):
			state = 1
		case state == 1 && strings.TrimSpace(line) == "```sh":
			state = 2
		case state == 2 && strings.TrimSpace(line) == "```":
			if len(cmds) == 0 {
				t.Fatalf("%s: the sh block after %q is empty", path, heading)
			}
			return cmds
		case state == 2:
			if cont, ok := strings.CutSuffix(line, `\`); ok {
				cur.WriteString(cont + "\n")
				continue
			}
			cur.WriteString(line)
			if c := strings.TrimSpace(cur.String()); c != "" && !strings.HasPrefix(c, "#") {
				cmds = append(cmds, c)
			}
			cur.Reset()
		}
	}
	t.Fatalf("%s: no complete ```sh block after %q", path, heading)
	return nil
}

// buildCLI builds the weightsnap CLI into dir, for the test's own preparation (the README builds
// and installs its own).
func buildCLI(t *testing.T, repo, dir string) string {
	t.Helper()
	if out, err := harness.Run(repo, "go", "build", "-o", dir+"/", "./cmd/weightsnap"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "weightsnap")
}

// weights is the synthetic model: its store identity and each file's sha256.
type weights struct {
	id    string
	files map[string]string // name: hex sha256
}

// printed checks that out, a container's `sha256sum DIR*`, lists every file with its sha256.
func (w weights) printed(t *testing.T, dir, out string) {
	t.Helper()
	t.Logf("the container printed:\n%s", out)
	for name, sum := range w.files {
		if !strings.Contains(out, sum+"  "+dir+name) {
			t.Errorf("the container did not print %s%s with its source sha256 %s", dir, name, sum)
		}
	}
}

// model synthesises a small checkpoint, imports it into the store work/src and returns it.
func model(t *testing.T, cli, work string) weights {
	t.Helper()
	ckpt, src := filepath.Join(work, "ckpt"), filepath.Join(work, "src")
	ws := func(args ...string) string {
		out, err := harness.Run(work, append([]string{cli, "--root", src, "--config", ""}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	ws("dev", "synth", "--out", ckpt, "--size", "8MiB", "--shards", "2")
	w := weights{
		id:    ws("import", ckpt, "--revision", "0123456789abcdef0123456789abcdef01234567", "--repository", "example/llama"),
		files: map[string]string{},
	}
	ents, err := os.ReadDir(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			w.files[e.Name()] = harness.FileSHA256(t, filepath.Join(ckpt, e.Name()))
		}
	}
	if len(w.files) == 0 {
		t.Fatalf("dev synth wrote no files in %s", ckpt)
	}
	return w
}

// runSandbox runs prepare, then cmds in order, on the sandbox node (sandbox.sh) inside ns, and
// returns each command's output. A failure names the command and its output.
func runSandbox(t *testing.T, ns *harness.NS, tools *harness.Tools, repo, work, prepare string, cmds []string) []string {
	t.Helper()
	for _, d := range []string{"cmd", "tmpfs"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := os.WriteFile(filepath.Join(work, "cmd", fmt.Sprintf("%d.sh", i)), []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prep := filepath.Join(work, "prepare.sh")
	if err := os.WriteFile(prep, []byte(prepare), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("sandbox.sh")
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(work, "sandbox.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), sandboxTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+ns.Name,
		"unshare", "--mount", "--propagation", "private", "bash", script)
	cmd.Env = append(os.Environ(), "WORK="+work, "REPO="+repo, "PEERS="+tools.Bin, "CNI="+tools.CNI, "PREPARE="+prep)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 30 * time.Second
	runErr := cmd.Run()

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(work, name))
		if err != nil {
			return fmt.Sprintf("(%v)", err)
		}
		return string(b)
	}
	if failed, err := os.ReadFile(filepath.Join(work, "failed")); err == nil {
		var n, rc int
		if _, err := fmt.Sscan(string(failed), &n, &rc); err != nil {
			t.Fatalf("the preparation failed:\n%s\nsandbox:\n%s", read("prepare.log"), read("sandbox.log"))
		}
		var before strings.Builder // what the earlier commands (weightsnapd's log among them) said
		for i := range n {
			fmt.Fprintf(&before, "--- %s\n%s\n", cmds[i], harness.Tail(filepath.Join(work, "out", fmt.Sprintf("%d.log", i)), 15))
		}
		if _, err := os.Stat(filepath.Join(work, "containerd.log")); err == nil {
			fmt.Fprintf(&before, "--- containerd's log\n%s\n", harness.Tail(filepath.Join(work, "containerd.log"), 20))
		}
		t.Fatalf("walkthrough command %d failed (exit %d):\n  %s\noutput:\n%s\nthe commands before it:\n%s",
			n+1, rc, cmds[n], read(fmt.Sprintf("out/%d.log", n)), before.String())
	}
	if runErr != nil {
		t.Fatalf("the sandbox failed: %v\n%s", runErr, read("sandbox.log"))
	}
	outs := make([]string, len(cmds))
	for i := range cmds {
		outs[i] = read(fmt.Sprintf("out/%d.log", i))
	}
	return outs
}
