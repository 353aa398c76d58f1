package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// TestStoreEvictsForNewModels: on a 1 GiB store
// (a tmpfs) holding three 300 MiB models, one pinned and one host-mounted
// through weightsnapd, importing a fourth and a fifth succeeds, each
// evicting the least recently used unpinned, unleased artifact; the pinned
// and the mounted ones survive and df shows the bytes back; a model that
// cannot fit beside the pinned and leased ones fails at once, naming them,
// and evicts nothing.
func TestStoreEvictsForNewModels(t *testing.T) {
	// The daemon's watermark (85% by default) would evict the free models on
	// its own: here only the imports evict.
	ws := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{StoreTmpfs: "1g", ExtraConfig: "[store]\nhigh_watermark_percent = 0\n"})
	base := t.TempDir()
	model := func(i int, size string) string {
		dir := filepath.Join(base, fmt.Sprint("m", i))
		if r := wsWith(t, ws.Config, "dev", "synth", "--out", dir, "--size", size, "--shards", "2", "--seed", fmt.Sprint(320+i)); r.code != 0 {
			t.Fatalf("synth: exit %d\n%s", r.code, r.errOut)
		}
		return dir
	}
	importModel := func(i int, size string) wsResult {
		return wsWith(t, ws.Config, "import", model(i, size), "--revision", storetest.Revision, "--repository", fmt.Sprint("org/m", i))
	}
	var ids []string
	for i := range 5 {
		r := importModel(i, "300MiB")
		if r.code != 0 {
			t.Fatalf("import of model %d: exit %d\n%s%s", i, r.code, r.out, r.errOut)
		}
		ids = append(ids, strings.TrimPrefix(strings.TrimSpace(r.out), "sha256:"))
		switch i {
		case 0:
			if r := wsWith(t, ws.Config, "pin", ids[0], "--reason", "the golden model"); r.code != 0 {
				t.Fatalf("pin: exit %d\n%s", r.code, r.errOut)
			}
		case 1:
			dir := filepath.Join(harness.TempDir(t), "mnt")
			if r := wsWith(t, ws.Config, "mount", ids[1], dir); r.code != 0 {
				t.Fatalf("mount: exit %d\n%s", r.code, r.errOut)
			}
			t.Cleanup(func() { wsWith(t, ws.Config, "umount", dir) })
		}
	}
	// The fourth evicted the third (the least recently used free one), the
	// fifth the fourth.
	stored := storedIDs(t, ws)
	for i, want := range []bool{true, true, false, false, true} {
		if (stored[ids[i]] > 0) != want {
			t.Errorf("model %d stored %v, want %v (store: %v)", i, stored[ids[i]], want, stored)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(ws.Root, &st); err != nil {
		t.Fatal(err)
	}
	used, three := int64(st.Blocks-st.Bfree)*st.Bsize, 3*stored[ids[4]]+8<<20
	if used > three || used >= 1<<30 {
		du, _ := harness.Run(ws.Root, "du", "-ab", "--max-depth=2", ".")
		t.Fatalf("df: %d bytes used on the store's filesystem, want three models' (%d at most)\n%s", used, three, du)
	}
	// 500 MiB cannot fit beside the pinned and the mounted ones (600 MiB of 1 GiB).
	r := importModel(5, "500MiB")
	msg := r.errOut
	if r.code != 5 || !strings.Contains(msg, "eviction could free") || !strings.Contains(msg, ids[0][:12]) || !strings.Contains(msg, "pinned by cli") ||
		!strings.Contains(msg, "the golden model") || !strings.Contains(msg, ids[1][:12]) || !strings.Contains(msg, "leased by") {
		t.Fatalf("import of a model that cannot fit: exit %d, want 5 naming the pinned %s and the leased %s\n%s%s", r.code, ids[0][:12], ids[1][:12], r.out, msg)
	}
	if storedIDs(t, ws)[ids[4]] == 0 {
		t.Fatal("the refused import evicted the fifth model")
	}
	t.Logf("refused: %s", strings.TrimSpace(msg))
}

// storedIDs is the identity hexes the daemon's store holds, with their bytes.
func storedIDs(t *testing.T, ws *harness.Weightsnapd) map[string]int64 {
	t.Helper()
	r := wsWith(t, ws.Config, "ls", "--json")
	var list []struct {
		ID    string `json:"id"`
		Bytes int64  `json:"total_bytes"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); r.code != 0 || err != nil {
		t.Fatalf("ls: exit %d, %v\n%s", r.code, err, r.errOut)
	}
	out := map[string]int64{}
	for _, a := range list {
		out[a.ID] = a.Bytes
	}
	return out
}
