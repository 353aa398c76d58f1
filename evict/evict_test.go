package evict_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// evictionStore opens a store of max bytes holding n distinct 1 MiB
// models, built in order and then used in the order given (the first of use
// is the least recently used).
func evictionStore(t *testing.T, policy store.Policy, n int, use []int) (*store.Domain, *evict.Policy, []artifact.ID, *[]store.Evicted) {
	t.Helper()
	ctx := context.Background()
	d, ev := open(t, t.TempDir(), policy)
	var evicted []store.Evicted
	ev.OnEvict(func(e store.Evicted) { evicted = append(evicted, e) })
	ids := make([]artifact.ID, n)
	for i := range n {
		src, id := storetest.Model(t, mib, uint64(100+i))
		var err error
		if ids[i], err = storetest.Build(ctx, d, src, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range use {
		l, err := d.Lookup(ctx, ids[i], "")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	return d, ev, ids, &evicted
}

// open opens a store at root with policy, its builds making room with its eviction policy.
func open(t *testing.T, root string, policy store.Policy) (*store.Domain, *evict.Policy) {
	t.Helper()
	d, err := store.Open(context.Background(), root, &policy)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := evict.New(d)
	if err != nil {
		t.Fatal(err)
	}
	d.SetRoomMaker(ev)
	return d, ev
}

func present(d *store.Domain, id artifact.ID) bool {
	_, err := os.Stat(filepath.Join(d.Root(), "artifacts", id.Hex()))
	return err == nil
}

func TestEvictionTakesTheLeastRecentlyUsedFree(t *testing.T) {
	policy := store.DefaultPolicy()
	policy.MaxStoreBytes = 3*mib + mib/2
	for _, tc := range []struct {
		name    string
		use     []int // after the builds, in this order
		pin     []int
		lease   []int
		build   []int // build lock held by another holder
		linked  []int // a file also linked outside the store
		evicted int   // the one the fourth build evicts
	}{
		{name: "built order", evicted: 0},
		{name: "use reorders", use: []int{0, 1}, evicted: 2},
		{name: "pinned skipped", pin: []int{0}, evicted: 1},
		{name: "leased skipped", lease: []int{0}, evicted: 1},
		{name: "being built skipped", build: []int{0}, evicted: 1},
		{name: "pinned and leased skipped", use: []int{2}, pin: []int{0}, lease: []int{1}, evicted: 2},
		{name: "linked outside frees nothing", linked: []int{0}, evicted: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			d, _, ids, evicted := evictionStore(t, policy, 3, tc.use)
			for _, i := range tc.pin {
				if err := d.Pin(ctx, ids[i], store.Pin{By: store.PinByCLI, Reason: "keep"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.lease {
				l, err := d.Lookup(ctx, ids[i], "")
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			for _, i := range tc.build {
				f, err := os.OpenFile(filepath.Join(d.Root(), "locks", ids[i].Hex()+".build.lock"), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.linked {
				l, _ := d.Lookup(ctx, ids[i], "")
				if err := os.Link(l.Files()[0].Abs, filepath.Join(t.TempDir(), "link")); err != nil {
					t.Fatal(err)
				}
				l.Close()
			}
			src, id := storetest.Model(t, mib, 200)
			fourth, err := storetest.Build(ctx, d, src, id)
			if err != nil {
				t.Fatalf("fourth build: %v", err)
			}
			if len(*evicted) != 1 || (*evicted)[0].ID != ids[tc.evicted] || (*evicted)[0].Reason != evict.Capacity || (*evicted)[0].Bytes < mib {
				t.Fatalf("evicted %+v, want only artifact %d (%s) for capacity", *evicted, tc.evicted, ids[tc.evicted].Short())
			}
			for i, id := range ids {
				if present(d, id) == (i == tc.evicted) {
					t.Errorf("artifact %d present %v after the eviction", i, present(d, id))
				}
			}
			if !present(d, fourth) {
				t.Fatal("the fourth artifact is missing")
			}
			if entries, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(entries) != 0 {
				t.Fatalf("temp entries after the eviction: %v", entries)
			}
		})
	}
}

func TestBuildThatCannotFitEvictsNothing(t *testing.T) {
	ctx := context.Background()
	policy := store.DefaultPolicy()
	policy.MaxStoreBytes = 3*mib + mib/2
	d, _, ids, evicted := evictionStore(t, policy, 3, nil)
	if err := d.Pin(ctx, ids[0], store.Pin{By: store.PinByCLI, Reason: "golden"}); err != nil {
		t.Fatal(err)
	}
	l, err := d.Lookup(ctx, ids[1], "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	src, id := storetest.Model(t, 2*mib, 300) // fits only if the pinned or leased one went
	_, err = storetest.Build(ctx, d, src, id)
	var ce *store.CapacityError
	if !errors.As(err, &ce) || !errdefs.IsResourceExhausted(err) || ce.Limit != "max_store_bytes" {
		t.Fatalf("build of 2 MiB beside a pin and a lease: %v, want a max_store_bytes CapacityError", err)
	}
	msg := err.Error()
	for _, want := range []string{ids[0].Short(), "pinned by cli", "golden", ids[1].Short(), "leased by", "eviction could free 1.0 MiB", "unpin"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if ce.Reclaimable < mib || len(ce.Held) != 2 {
		t.Errorf("reclaimable %d, held %+v", ce.Reclaimable, ce.Held)
	}
	if len(*evicted) != 0 || !present(d, ids[2]) {
		t.Fatalf("a build that cannot fit evicted %+v", *evicted)
	}
}

func TestEvictionOffRefuses(t *testing.T) {
	policy := store.DefaultPolicy()
	policy.MaxStoreBytes, policy.Eviction = 3*mib+mib/2, evict.Off
	d, _, ids, evicted := evictionStore(t, policy, 3, nil)
	src, id := storetest.Model(t, mib, 200)
	_, err := storetest.Build(context.Background(), d, src, id)
	if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), `eviction = "off"`) {
		t.Fatalf("build past the limit with eviction off: %v", err)
	}
	if len(*evicted) != 0 || !present(d, ids[0]) {
		t.Fatal("eviction off evicted")
	}
}

func TestLastUseOrdersAfterReopen(t *testing.T) {
	ctx := context.Background()
	policy := store.DefaultPolicy()
	d, _, ids, _ := evictionStore(t, policy, 3, []int{0, 2, 1})
	d2, ev := open(t, d.Root(), policy)
	rep, err := ev.To(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []artifact.ID
	for _, e := range rep.Evicted {
		got = append(got, e.ID)
	}
	if want := []artifact.ID{ids[0], ids[2], ids[1]}; !slices.Equal(got, want) || !rep.DryRun {
		t.Fatalf("dry run order %v, want %v", got, want)
	}
	for _, id := range ids {
		if !present(d2, id) {
			t.Fatal("a dry run evicted")
		}
	}
	if err := ev.Demote(ids[1]); err != nil {
		t.Fatal(err)
	}
	rep, err = ev.To(ctx, 0, false)
	if err != nil || len(rep.Evicted) != 3 || rep.Evicted[0].ID != ids[1] {
		t.Fatalf("evict all after a demotion: %+v, %v", rep, err)
	}
	for _, id := range ids {
		if present(d2, id) {
			t.Fatal("an artifact survived eviction to 0 bytes")
		}
	}
}

func TestHardlinksCountOnce(t *testing.T) {
	ctx := context.Background()
	policy := store.DefaultPolicy()
	d, ev, ids, _ := evictionStore(t, policy, 1, nil)
	before := d.UseOf(ids[0])
	l, _ := d.Lookup(ctx, ids[0], "")
	for i, f := range l.Files() {
		if err := os.Link(f.Abs, filepath.Join(t.TempDir(), "f"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	after := d.UseOf(ids[0])
	if after.Bytes != before.Bytes || after.Frees > 64<<10 || before.Frees != before.Bytes {
		t.Fatalf("before the links %+v, after %+v", before, after)
	}
	rep, err := ev.To(ctx, 0, false)
	if err != nil || len(rep.Evicted) != 0 || len(rep.Held) != 1 || !strings.Contains(rep.Held[0].Why, "linked by weight snapshots") {
		t.Fatalf("eviction of an artifact whose files are linked elsewhere: %+v, %v", rep, err)
	}
}

func TestWatermarkEvictsDownToTheLowMark(t *testing.T) {
	root := testenv.Tmpfs(t, "16m")
	ctx := context.Background()
	policy := store.DefaultPolicy()
	policy.HighWatermarkPercent, policy.LowWatermarkPercent = 50, 25
	d, ev := open(t, root, policy)
	var ids []artifact.ID
	for i := range 3 {
		src, id := storetest.Model(t, 3*mib, uint64(500+i))
		got, err := storetest.Build(ctx, d, src, id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got)
	}
	if err := d.Pin(ctx, ids[0], store.Pin{By: store.PinByCLI}); err != nil {
		t.Fatal(err)
	}
	rep, err := ev.ToWatermark(ctx)
	if err != nil || rep == nil {
		t.Fatalf("watermark at 9 of 16 MiB: %+v, %v", rep, err)
	}
	// 9 MiB used of 16: down to 4 MiB takes both unpinned ones.
	if len(rep.Evicted) != 2 || present(d, ids[1]) || present(d, ids[2]) || !present(d, ids[0]) || rep.Freed < rep.Need || rep.Evicted[0].Reason != evict.Watermark {
		t.Fatalf("watermark eviction %+v", rep)
	}
	if rep, err := ev.ToWatermark(ctx); rep != nil || err != nil {
		t.Fatalf("under the high watermark: %+v, %v", rep, err)
	}
	b, err := d.Bytes(ctx)
	if err != nil || b.Pinned < 3*mib || b.Ready != b.Pinned || b.Free < 8*mib {
		t.Fatalf("bytes %+v, %v", b, err)
	}
}
