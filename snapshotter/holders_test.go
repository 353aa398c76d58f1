package snapshotter

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
)

// TestHolderTable: one holder may wait for several artifacts, each
// repaired on its own; a host mount's record lives and goes with its
// holder; the gauges follow the table.
func TestHolderTable(t *testing.T) {
	a := artifact.MustParseID("sha256:" + strings.Repeat("a", 64))
	b := artifact.MustParseID("sha256:" + strings.Repeat("b", 64))
	m := NewMetrics()
	tb := newHolderTable(m)
	mountDir := "/models/m"
	mount := mountHolderPrefix + mountDir

	tb.set("container", a, useRepairing)
	tb.set("container", b, useRepairing)
	tb.setMount(control.HostMountInfo{Dir: mountDir, ID: a})
	tb.set(mount, a, useLeased)
	if got := testutil.ToFloat64(m.pendingRepairs); got != 1 {
		t.Fatalf("pending repairs %v, want 1 (one holder waits)", got)
	}
	if !tb.promote("container", a, true) || tb.promote("container", a, true) {
		t.Fatal("the repair of a is taken once")
	}
	for _, tc := range []struct {
		id   artifact.ID
		st   useState
		want []string
	}{
		{a, useLeased, []string{"container", mount}},
		{a, useRepairing, nil},
		{b, useRepairing, []string{"container"}},
		{b, useLeased, nil},
	} {
		if got := tb.of(tc.id, tc.st); !slices.Equal(got, tc.want) {
			t.Errorf("holders of %s in state %d: %q, want %q", tc.id.Short(), tc.st, got, tc.want)
		}
	}
	if ms := tb.mounts(); len(ms) != 1 || ms[0].Dir != mountDir || !ms[0].Leased {
		t.Fatalf("mounts %+v", ms)
	}
	if got := tb.drop("container"); !slices.Equal(got, []artifact.ID{a}) {
		t.Fatalf("drop returned %v, want the leased a only", got)
	}
	if tb.anyOf(b, useRepairing) || testutil.ToFloat64(m.pendingRepairs) != 0 {
		t.Fatal("a dropped holder still waits for b")
	}
	if tb.promote(mount, b, false) {
		t.Fatal("promoted a use never made")
	}
	tb.drop(mount)
	if _, ok := tb.mount(mountDir); ok || testutil.ToFloat64(m.hostMounts) != 0 || tb.anyOf(a, useLeased) {
		t.Fatal("an undone host mount left its record or its lease")
	}
}
