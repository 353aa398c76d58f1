package powercut

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// scenario is one store operation the harness cuts, from a prepared state.
type scenario struct {
	name string
	op   string // the child's operation
	// during and after are what the source's artifact must be (for the
	// child's check) when the power is cut before and after the operation
	// returned.
	during, after string
	wantOut       string // how the child's output starts when the operation returns
	// prepare writes, with the store on an ordinary filesystem, the state
	// the operation starts from, and returns it as a durable image.
	prepare func(t *testing.T, s *storetest.Source) *Image
}

var scenarios = []scenario{
	{name: "import", op: "import", during: "any", after: "ready", wantOut: "ok",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {})},
	{name: "publication", op: "build", during: "any", after: "ready", wantOut: "ok",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {
			if _, err := store.Open(context.Background(), root, nil); err != nil {
				t.Fatal(err)
			}
		})},
	{name: "deny", op: "deny", during: "any-corrupted", after: "denied", wantOut: "error *store.InvalidError",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {
			s.Publish(t, root)
			storetest.Corrupt(t, root, s.ID.Hex())
		})},
	{name: "quarantine", op: "rebuild", during: "any", after: "ready", wantOut: "ok",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {
			d := s.Publish(t, root)
			storetest.Corrupt(t, root, s.ID.Hex())
			if _, err := d.Lookup(context.Background(), s.ID, store.FullChecksum); !store.IsInvalid(err) {
				t.Fatalf("corrupted artifact not denied: %v", err)
			}
		})},
	{name: "removal", op: "remove", during: "any", after: "gone", wantOut: "ok",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) { s.Publish(t, root) })},
	{name: "eviction", op: "evict", during: "any", after: "gone", wantOut: "ok evicted 1",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) { s.Publish(t, root) })},
	{name: "gc", op: "gc", during: "ready", after: "ready", wantOut: "ok gc",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {
			s.Publish(t, root)
			leaveGarbage(t, root)
		})},
}

// prepared writes a state in a fresh directory with fill and snapshots it.
func prepared(fill func(t *testing.T, root string, s *storetest.Source)) func(*testing.T, *storetest.Source) *Image {
	return func(t *testing.T, s *storetest.Source) *Image {
		t.Helper()
		root := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		fill(t, root, s)
		img, err := Snapshot(root)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
}

// leaveGarbage leaves what gc removes or clears: a dead builder's temp
// build, interrupted removals (a tombstone in tmp/ and one beside the
// artifacts), an entry quarantined long ago, an artifact a stopped
// quarantine left without the hardened mode, and the deny marker of an
// entry that no longer exists.
func leaveGarbage(t *testing.T, root string) {
	t.Helper()
	fakeID := func(n int) string { return fmt.Sprintf("%064x", n) }
	stale := filepath.Join(root, "tmp", fakeID(1)+".0123456789ab")
	must(t, os.Mkdir(stale, 0o700))
	must(t, os.WriteFile(filepath.Join(stale, "model.safetensors"), make([]byte, 8<<10), 0o600))
	for i, dst := range []string{"tmp/.cleanup.%s.0123456789ab", "quarantine/%s.1", "artifacts/.cleanup.%s.0123456789ab", "artifacts/%s"} {
		o := storetest.NewSource(t, 32<<10, 1, uint64(100+i))
		o.Publish(t, root)
		src := filepath.Join(root, "artifacts", o.ID.Hex())
		must(t, os.Chmod(src, 0o700))
		if dst := filepath.Join(root, fmt.Sprintf(dst, o.ID.Hex())); dst != src {
			must(t, os.Rename(src, dst))
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "deny", fakeID(2)), []byte(`{"reason":"test"}`), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
