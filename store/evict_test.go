package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const mib = 1 << 20

// storeOf opens a store holding n distinct 1 MiB models.
func storeOf(t *testing.T, n int) (*store.Domain, []artifact.ID) {
	t.Helper()
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]artifact.ID, n)
	for i := range n {
		src, id := storetest.Model(t, mib, uint64(100+i))
		if ids[i], err = storetest.Build(ctx, d, src, id); err != nil {
			t.Fatal(err)
		}
	}
	return d, ids
}

func present(d *store.Domain, id artifact.ID) bool {
	_, err := os.Stat(filepath.Join(d.Root(), "artifacts", id.Hex()))
	return err == nil
}

func TestPinsByHolder(t *testing.T) {
	ctx := context.Background()
	d, ids := storeOf(t, 1)
	id := ids[0]
	for _, by := range []string{store.PinByCLI, "prefetch:models.toml"} {
		if err := d.Pin(ctx, id, store.Pin{By: by}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := d.Unpin(ctx, id, store.PinByCLI); n != 1 || err != nil {
		t.Fatalf("unpin cli: %d, %v", n, err)
	}
	if pins, _ := d.Pins(id); len(pins) != 1 || pins[0].By != "prefetch:models.toml" {
		t.Fatalf("pins after the cli's unpin: %+v", pins)
	}
	if err := d.Remove(ctx, id); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "prefetch:models.toml") {
		t.Fatalf("rm of a pinned artifact: %v", err)
	}
	if u := d.UseOf(id); !u.Pinned() || u.Leased || u.Frees < mib || u.Bytes != u.Frees {
		t.Fatalf("use %+v", u)
	}
	if n, err := d.Unpin(ctx, id, ""); n != 1 || err != nil {
		t.Fatalf("unpin all: %d, %v", n, err)
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := d.Pin(ctx, id, store.Pin{By: store.PinByCLI}); !errors.Is(err, store.ErrMiss) {
		t.Fatalf("pin of an absent artifact: %v", err)
	}
}

// TestPinKeepsLastUse: pinning and unpinning are no uses: the artifact
// keeps its place in the least-recently-used order; a lookup is one.
func TestPinKeepsLastUse(t *testing.T) {
	ctx := context.Background()
	d, ids := storeOf(t, 1)
	id := ids[0]
	then := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		op   func() error
		used bool
	}{
		{"pin", func() error { return d.Pin(ctx, id, store.Pin{By: store.PinByCLI}) }, false},
		{"pin again", func() error { return d.Pin(ctx, id, store.Pin{By: store.PinByCLI, Reason: "again"}) }, false},
		{"unpin", func() error { _, err := d.Unpin(ctx, id, ""); return err }, false},
		{"lookup", func() error {
			l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
			if err == nil {
				l.Close()
			}
			return err
		}, true},
	} {
		if err := d.SetLastUse(id, then); err != nil {
			t.Fatal(err)
		}
		if err := tc.op(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := d.LastUse(id); got.Equal(then) == tc.used {
			t.Errorf("%s: last use %v (it was %v), want a use %v", tc.name, got, then, tc.used)
		}
	}
}

// TestCapacityErrorCrossesGRPC: a capacity refusal without an ENOSPC cause
// converts to a gRPC status (the CRI answers it to the kubelet) as
// ResourceExhausted, with no nil among the errors it unwraps to.
func TestCapacityErrorCrossesGRPC(t *testing.T) {
	err := error(&store.CapacityError{Limit: "max_store_bytes", Need: 2, Have: 1, Checked: true})
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if e == nil {
			t.Fatal("CapacityError unwraps to a nil error")
		}
	}
	if st := errgrpc.ToGRPC(fmt.Errorf("pull: %w", err)); status.Code(st) != codes.ResourceExhausted {
		t.Fatalf("gRPC code %v", status.Code(st))
	}
}

// TestEvictRefusesWhatIsHeld: Domain.Evict removes an artifact nothing
// holds and refuses, with a *HeldError, one that a pin, a lease or a link
// outside the store holds, leaving it in place.
func TestEvictRefusesWhatIsHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(t *testing.T, d *store.Domain, id artifact.ID)
		why  string // "" when it is evicted
	}{
		{name: "free", hold: func(*testing.T, *store.Domain, artifact.ID) {}},
		{name: "pinned", why: "pinned by cli", hold: func(t *testing.T, d *store.Domain, id artifact.ID) {
			if err := d.Pin(context.Background(), id, store.Pin{By: store.PinByCLI}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "leased", why: "leased", hold: func(t *testing.T, d *store.Domain, id artifact.ID) {
			l, err := d.Lookup(context.Background(), id, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}},
		{name: "linked outside", why: "linked outside the store", hold: func(t *testing.T, d *store.Domain, id artifact.ID) {
			l, err := d.Lookup(context.Background(), id, "")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := os.Link(l.Files()[0].Abs, filepath.Join(t.TempDir(), "link")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ids := storeOf(t, 1)
			tc.hold(t, d, ids[0])
			ev, err := d.Evict(context.Background(), ids[0], "manual")
			if tc.why == "" {
				if err != nil || ev.ID != ids[0] || ev.Bytes < mib || ev.Reason != "manual" || present(d, ids[0]) {
					t.Fatalf("evict: %+v, %v; present %v", ev, err, present(d, ids[0]))
				}
				return
			}
			var he *store.HeldError
			if !errors.As(err, &he) || !errdefs.IsFailedPrecondition(err) || !strings.Contains(he.Why, tc.why) {
				t.Fatalf("evict of a held artifact: %v, want a HeldError saying %q", err, tc.why)
			}
			if !present(d, ids[0]) {
				t.Fatal("a refused eviction removed the artifact")
			}
		})
	}
}
