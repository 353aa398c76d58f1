package crash

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// killPoints are the steps of a build, an eviction and a cleanup at which
// TestTwoProcessesThroughAFullStore kills its second process.
var killPoints = []string{
	"write.mid-payload", "write.after-close", "publish.after-index", "publish.after-rename",
	"publish.after-harden", "evict.locked", "evict.after-rename", "evict.after-sync",
	"evict.before-delete", "cleanup.before-remove", "cleanup.after-tombstone", "remove.mid-delete",
}

// TestTwoProcessesThroughAFullStore builds six models in turn from two
// processes at once through a store that holds four. The second process is
// killed with SIGKILL at steps of its builds, evictions and cleanups chosen
// at random (seeded). No build that is not killed fails: there is always
// something to evict. The store is full by max_store_bytes, or by its own
// small filesystem, where builds meet ENOSPC.
func TestTwoProcessesThroughAFullStore(t *testing.T) {
	const size = 1 << 20
	models := make([]*storetest.Source, 6)
	for i := range models {
		models[i] = storetest.NewSource(t, size, 1+i%2, uint64(3000+i))
	}
	for _, tc := range []struct {
		name  string
		tmpfs bool // a filesystem of the store's own that holds four models
	}{
		{name: "max_store_bytes"},
		{name: "full filesystem", tmpfs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "store")
			p := store.DefaultPolicy()
			if tc.tmpfs {
				if err := os.MkdirAll(root, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := unix.Mount("tmpfs", root, "tmpfs", 0, fmt.Sprintf("size=%d", 4*size+size/2)); err != nil {
					t.Skipf("a tmpfs of the store's own needs root: %v", err)
				}
				t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
			} else {
				p.MaxStoreBytes = 4*size + size/2
			}
			d, err := store.Open(context.Background(), root, &p)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(49, 1))
			faults := make([]string, 3*len(models))
			for i := range faults {
				faults[i] = killPoints[rng.IntN(len(killPoints))] + ":kill"
			}
			var wg sync.WaitGroup
			failures := make(chan string, 6*len(models))
			run := func(name string, order func(int) int, fault func(int) string) {
				defer wg.Done()
				for i := range 3 * len(models) {
					m := models[order(i)%len(models)]
					out, killed := runChild(t, fault(i), "build", root, m.Dir)
					if !killed && !strings.HasPrefix(out, "ok ") {
						failures <- fmt.Sprintf("%s, build %d of %s: %s", name, i, m.ID.Short(), out)
					}
				}
			}
			wg.Add(2)
			go run("the first process", func(i int) int { return i }, func(int) string { return "" })
			go run("the killed process", func(i int) int { return 3*len(models) - i }, func(i int) string { return faults[i] })
			wg.Wait()
			close(failures)
			for f := range failures {
				t.Error(f)
			}
			if _, err := d.GC(context.Background(), store.GCOptions{}); err != nil {
				t.Fatal(err)
			}
			checkAccounting(t, tc.name, d)
			if tc.tmpfs {
				checkFilesystemUse(t, d)
			}
		})
	}
}

// checkFilesystemUse compares what the store's own filesystem says it uses
// (df) with the bytes inspect --domain accounts: tmpfs charges each file
// whole pages, so df may exceed the accounted bytes by under a page a file.
func checkFilesystemUse(t *testing.T, d *store.Domain) {
	t.Helper()
	r, err := d.InspectDomain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var files int64
	err = filepath.WalkDir(d.Root(), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			files++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Root(), &st); err != nil {
		t.Fatal(err)
	}
	used := int64(st.Blocks-st.Bfree) * st.Bsize
	if used < r.TotalBytes || used >= r.TotalBytes+files*int64(os.Getpagesize()) {
		t.Errorf("df says the store's filesystem uses %d bytes; inspect --domain accounts %d in %d files", used, r.TotalBytes, files)
	}
}
