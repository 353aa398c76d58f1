package store_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestWant: an id is listed wanted while any of its Wants is held, and no
// longer once every one is released, its lock file gone; a release twice
// is harmless, and a lock file a dead holder left is removed unlisted.
func TestWant(t *testing.T) {
	d := storetest.Open(t)
	a, b, dead := artifact.MustParseID("sha256:"+strings.Repeat("a", 64)), artifact.MustParseID("sha256:"+strings.Repeat("b", 64)), artifact.MustParseID("sha256:"+strings.Repeat("c", 64))
	file := func(id artifact.ID) string { return filepath.Join(d.Root(), "locks", id.Hex()+".want.lock") }
	if err := os.WriteFile(file(dead), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wants := func() []artifact.ID {
		w := d.Wants()
		slices.SortFunc(w, func(x, y artifact.ID) int { return strings.Compare(x.Hex(), y.Hex()) })
		return w
	}
	if w := wants(); len(w) != 0 {
		t.Fatalf("a store with one dead holder's want wants %v", w)
	}
	ra1, err := d.Want(a)
	if err != nil {
		t.Fatal(err)
	}
	ra2, err := d.Want(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := d.Want(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		release func()
		want    []artifact.ID
	}{
		{"both held", func() {}, []artifact.ID{a, b}},
		{"one of a's two released", ra1, []artifact.ID{a, b}},
		{"the same released again", ra1, []artifact.ID{a, b}},
		{"b released", rb, []artifact.ID{a}},
		{"a's last released", ra2, nil},
	} {
		tc.release()
		if got := wants(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: wants %v, want %v", tc.name, got, tc.want)
		}
		for _, id := range []artifact.ID{a, b, dead} {
			if _, err := os.Stat(file(id)); (err == nil) != slices.Contains(tc.want, id) {
				t.Errorf("%s: the want lock file of %s: %v, want one only while it is wanted", tc.name, id.Short(), err)
			}
		}
	}
}

// TestWantConcurrent: resolves that want one id at once, each releasing
// it (and removing its file when last) while the others take it, are
// each listed while they hold it: a want never lands on a removed file.
func TestWantConcurrent(t *testing.T) {
	d := storetest.Open(t)
	id := artifact.MustParseID("sha256:" + strings.Repeat("d", 64))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				release, err := d.Want(id)
				if err != nil {
					t.Error(err)
					return
				}
				if !slices.Contains(d.Wants(), id) {
					t.Error("a held want is not listed")
				}
				release()
			}
		})
	}
	wg.Wait()
}
