package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containerd/errdefs"
)

// TestPolicyOverlay: an overlay takes only the keyed fields, reports each
// that changes with its values for people, and refuses an unknown key.
func TestPolicyOverlay(t *testing.T) {
	cur := DefaultPolicy()
	cur.MaxStoreBytes = 512 << 20
	over := DefaultPolicy()
	over.MaxStoreBytes = 1 << 30
	over.HighWatermarkPercent = 90
	over.Eviction = "off"
	for _, tc := range []struct {
		name    string
		keys    []string
		want    func(*Policy)
		changes []PolicyChange
		bad     bool
	}{
		{name: "no keys", want: func(*Policy) {}},
		{name: "one size", keys: []string{"max_store_bytes"}, want: func(p *Policy) { p.MaxStoreBytes = 1 << 30 },
			changes: []PolicyChange{{"max_store_bytes", "512.0 MiB", "1.0 GiB"}}},
		{name: "fields order, unchanged left out", keys: []string{"eviction", "validation", "high_watermark_percent"},
			want:    func(p *Policy) { p.Eviction, p.HighWatermarkPercent = "off", 90 },
			changes: []PolicyChange{{"eviction", "lru", "off"}, {"high_watermark_percent", "85", "90"}}},
		{name: "unknown key", keys: []string{"max_store_size"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changes, err := cur.Overlay(over, tc.keys)
			if tc.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Overlay = %v, want an invalid-argument error", err)
				}
				return
			}
			want := cur
			tc.want(&want)
			if err != nil || got != want || !reflect.DeepEqual(changes, tc.changes) {
				t.Fatalf("Overlay = %+v, %v, %v\nwant %+v, %v", got, changes, err, want, tc.changes)
			}
		})
	}
}

// TestPolicyKeys: every field of Policy has its own key.
func TestPolicyKeys(t *testing.T) {
	keys := PolicyKeys()
	seen := map[string]bool{}
	for _, k := range keys {
		if k == "" || seen[k] {
			t.Fatalf("PolicyKeys() = %v: an empty or repeated key", keys)
		}
		seen[k] = true
	}
	if len(keys) != reflect.TypeFor[Policy]().NumField() {
		t.Fatalf("PolicyKeys() = %v", keys)
	}
}

// TestReadPolicy: the recorded policy is read without a domain, sizes
// with units included, and a root without a store is not found.
func TestReadPolicy(t *testing.T) {
	root := t.TempDir()
	if _, err := ReadPolicy(root); !errdefs.IsNotFound(err) {
		t.Fatalf("ReadPolicy of an empty root = %v, want not found", err)
	}
	want := DefaultPolicy()
	want.MaxStoreBytes, want.HighWatermarkPercent, want.LowWatermarkPercent = 300<<20, 0, 0 // zeros are recorded too
	d, err := Open(context.Background(), root, &want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ReadPolicy(d.Root()); err != nil || got != want {
		t.Fatalf("ReadPolicy = %+v, %v; want %+v", got, err, want)
	}
	def := DefaultPolicy()
	if d, err := Open(context.Background(), root, &def); err != nil || d.Policy() != want {
		t.Fatalf("Open of the existing store with another policy = %+v, %v; want its recorded %+v", d.Policy(), err, want)
	}
	if err := os.WriteFile(filepath.Join(root, fileDomainPolicy), []byte(`{"validation": "full_checksum", "coordination_timeout_seconds": 5, "max_store_bytes": "1GiB"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	want = DefaultPolicy()
	want.Validation, want.CoordinationTimeoutSeconds, want.MaxStoreBytes = FullChecksum, 5, 1<<30
	if got, err := ReadPolicy(root); err != nil || got != want {
		t.Fatalf("ReadPolicy of a hand-written file = %+v, %v; want %+v", got, err, want)
	}
}
