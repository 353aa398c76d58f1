package store_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestWant: an id is listed wanted while any of its Wants is held, and no
// longer once every one is released; a release twice is harmless.
func TestWant(t *testing.T) {
	d := storetest.Open(t)
	a, b := artifact.MustParseID("sha256:"+strings.Repeat("a", 64)), artifact.MustParseID("sha256:"+strings.Repeat("b", 64))
	wants := func() []artifact.ID {
		w := d.Wants()
		slices.SortFunc(w, func(x, y artifact.ID) int { return strings.Compare(x.Hex(), y.Hex()) })
		return w
	}
	if w := wants(); len(w) != 0 {
		t.Fatalf("a new store wants %v", w)
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
	}
}
