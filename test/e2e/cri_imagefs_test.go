package e2e

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// TestCRIImageFsInfoNamesTheStore:
// through weightsnapd's CRI socket, crictl imagefsinfo names the store's
// filesystem with a used size at least the store's bytes; a weight image's
// size includes its artifact's bytes, and it is pinned while its artifact
// is; once the image is removed, its artifact is the first eviction
// candidate.
func TestCRIImageFsInfoNamesTheStore(t *testing.T) {
	c := startCRINode(t)
	a := c.pushArtifact(t, "fsinfo", "16MiB", 2)
	viaWS := []string{"--image-endpoint", "unix://" + c.ws.CRI}
	crictl(t, c.ctd, append(viaWS, "pull", a.ref)...)

	var fs struct {
		Status struct {
			ImageFilesystems []struct {
				FsID      struct{ Mountpoint string } `json:"fsId"`
				UsedBytes struct{ Value string }      `json:"usedBytes"`
			} `json:"imageFilesystems"`
		} `json:"status"`
	}
	out := crictl(t, c.ctd, append(viaWS, "imagefsinfo", "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &fs); err != nil || len(fs.Status.ImageFilesystems) == 0 {
		t.Fatalf("imagefsinfo: %v\n%s", err, out)
	}
	first := fs.Status.ImageFilesystems[0]
	used, _ := strconv.ParseInt(first.UsedBytes.Value, 10, 64)
	if want := mountpointOf(t, c.ws.Root); first.FsID.Mountpoint != want || used < a.bytes {
		t.Fatalf("imagefsinfo names %s with %d bytes used, want %s with at least the store's %d\n%s", first.FsID.Mountpoint, used, want, a.bytes, out)
	}

	status := func() (size int64, pinned bool) {
		t.Helper()
		var st struct {
			Status struct {
				Size   string `json:"size"`
				Pinned bool   `json:"pinned"`
			} `json:"status"`
		}
		out := crictl(t, c.ctd, append(viaWS, "inspecti", "-o", "json", a.ref)...)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("inspecti: %v\n%s", err, out)
		}
		size, _ = strconv.ParseInt(st.Status.Size, 10, 64)
		return size, st.Status.Pinned
	}
	if size, pinned := status(); size < a.bytes || pinned {
		t.Fatalf("weight image: size %d pinned %v, want at least the artifact's %d, not pinned", size, pinned, a.bytes)
	}
	if r := wsWith(t, c.ws.Config, "pin", a.hex); r.code != 0 {
		t.Fatalf("pin: exit %d\n%s", r.code, r.errOut)
	}
	if _, pinned := status(); !pinned {
		t.Fatal("the image of a pinned artifact is not reported pinned")
	}
	if r := wsWith(t, c.ws.Config, "unpin", a.hex); r.code != 0 {
		t.Fatalf("unpin: exit %d\n%s", r.code, r.errOut)
	}
	crictl(t, c.ctd, append(viaWS, "rmi", a.ref)...)
	r := wsWith(t, c.ws.Config, "ls", "--json")
	var list []struct {
		ID  string `json:"id"`
		Use struct {
			LastUse string `json:"last_use"`
		} `json:"use"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); err != nil {
		t.Fatal(err)
	}
	last := ""
	for _, e := range list {
		if e.ID == a.hex {
			last = e.Use.LastUse
		}
	}
	if last == "" {
		t.Fatalf("the store dropped %s when its image went (the harness turns the watermarks off):\n%s", a.hex, r.out)
	}
	if !strings.HasPrefix(last, "1970-") {
		t.Fatalf("after the last image that needs it went, the artifact's last use is %s, want the epoch (first candidate)", last)
	}
}

// mountpointOf is the top directory of path's filesystem.
func mountpointOf(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	for {
		parent := filepath.Dir(path)
		var pst unix.Stat_t
		if parent == path || unix.Stat(parent, &pst) != nil || pst.Dev != st.Dev {
			return path
		}
		path = parent
	}
}

// TestCRIEvictionGivesTheBytesBack (containerd's k8s.io
// namespace): on a 64 MiB store, an artifact that served a pod's image
// volume and is used no more is evicted when a CRI pull of another needs
// the room: weightsnapd first removes the unused image that needs it, so
// the weight snapshot's links go and df shows the bytes back.
func TestCRIEvictionGivesTheBytesBack(t *testing.T) {
	c := startCRINodeWith(t, harness.WeightsnapdOptions{StoreTmpfs: "64m"})
	first := c.pushArtifact(t, "first", "36MiB", 2)
	second := c.pushArtifact(t, "second", "34MiB", 2) // another size: another model
	viaWS := []string{"--image-endpoint", "unix://" + c.ws.CRI}
	crictl(t, c.ctd, append(viaWS, "pull", first.ref)...)
	crictl(t, c.ctd, "pull", c.base)
	checkSums(t, runReaderPod(t, c.ctd, readerPod{name: "first", image: c.base, dir: "/models/model", volume: first.ref}), first)
	crictl(t, c.ctd, "rmp", "-f", "-a") // the pod goes; its image and weight snapshot stay
	testenv.Eventually(t, time.Minute, func() bool { return !leased(t, c.ws.Config, first.hex) },
		"weightsnapd still leases the first artifact a minute after its pod went")
	if out, err := c.ctd.Crictl(append(viaWS, "pull", second.ref)...); err != nil {
		t.Fatalf("CRI pull of a second artifact that needs the first's room: %v\n%s", err, out)
	}
	if c.stored(t, first.id) || !c.stored(t, second.id) {
		t.Fatalf("store after the second pull: %v, want only %s", c.ids(t), second.id)
	}
	if out, err := c.ctd.Crictl(append(viaWS, "inspecti", first.ref)...); err == nil {
		t.Fatalf("the unused image of the evicted artifact is left:\n%s", out)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(c.ws.Root, &st); err != nil {
		t.Fatal(err)
	}
	if used := int64(st.Blocks-st.Bfree) * st.Bsize; used > second.bytes+8<<20 {
		t.Fatalf("df: %d bytes used on the store's filesystem, want about one artifact's %d", used, second.bytes)
	}
	checkSums(t, runReaderPod(t, c.ctd, readerPod{name: "second", image: c.base, dir: "/models/model", volume: second.ref}), second)
}

// leased says whether the store shows the artifact hex leased.
func leased(t *testing.T, config, hex string) bool {
	t.Helper()
	r := wsWith(t, config, "ls", "--json")
	var list []struct {
		ID  string `json:"id"`
		Use struct {
			Leased bool `json:"leased"`
		} `json:"use"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); err != nil {
		t.Fatalf("ls: %v\n%s", err, r.errOut)
	}
	for _, e := range list {
		if e.ID == hex {
			return e.Use.Leased
		}
	}
	return false
}
