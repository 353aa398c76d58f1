package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestGC(t *testing.T) {
	idA, idB, idC := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	for _, tc := range []struct {
		name        string
		all         bool
		wantRemoved []string
		wantKept    []string
		wantTmp     []string // left in tmp/, sorted
	}{
		{"default", false, []string{idA + ".old"}, []string{idC + ".young"}, []string{idB + ".alive", idC + ".young"}},
		{"all", true, []string{idA + ".old", idC + ".young"}, nil, []string{idB + ".alive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Open(context.Background(), t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			mk := func(p string) {
				if err := os.MkdirAll(p, 0o700); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(p, "f"), make([]byte, 100), 0o600)
			}
			mk(d.path(dirTmp, idA+".old"))                                              // a dead builder's, two days old
			mk(d.path(dirTmp, idC+".young"))                                            // a dead builder's, just now
			mk(d.path(dirTmp, ".cleanup."+idA+".x"))                                    // an interrupted gc of a temp build
			mk(d.path(dirArtifacts, ".cleanup."+idC+".y"))                              // an interrupted removal
			mk(d.path(dirTmp, idB+".alive"))                                            // a live builder's temp build
			mk(d.path(dirQuarantine, idA+".1000"))                                      // quarantined long ago
			mk(d.path(dirQuarantine, fmt.Sprintf("%s.%d", idB, time.Now().UnixNano()))) // just now
			os.WriteFile(d.path(dirDeny, idA), []byte("{}"), 0o644)                     // marker of an absent entry
			old := time.Now().Add(-48 * time.Hour)
			for _, p := range []string{d.path(dirTmp, idA+".old", "f"), d.path(dirTmp, idA+".old")} {
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
			live, ok, err := tryLock(d.ownerLockPath(idB, "build"), unix.LOCK_EX)
			if !ok || err != nil {
				t.Fatal(err)
			}
			defer live.Close()

			r, err := d.GC(context.Background(), GCOptions{All: tc.all})
			if err != nil {
				t.Fatal(err)
			}
			temps := len(tc.wantRemoved)
			if want := (Usage{temps, 100 * int64(temps)}); r.Temps != want || r.Tombstones != (Usage{2, 200}) || r.Quarantined != (Usage{1, 100}) || r.DenyMarkers != 1 {
				t.Fatalf("gc report %+v, want temps %+v", *r, want)
			}
			names := func(ts []TempBuild) (out []string) {
				for _, b := range ts {
					if b.Reason == "" || b.Bytes != 100 {
						t.Errorf("%s: bytes %d, reason %q", b.Name, b.Bytes, b.Reason)
					}
					out = append(out, b.Name)
				}
				return out
			}
			if got := names(r.Removed); !sameSet(got, tc.wantRemoved) {
				t.Errorf("removed %v, want %v", got, tc.wantRemoved)
			}
			if got := names(r.Kept); !sameSet(got, tc.wantKept) {
				t.Errorf("kept %v, want %v", got, tc.wantKept)
			}
			if len(r.Kept) == 1 && (r.Kept[0].ID.Hex() != idC || !strings.Contains(r.Kept[0].Reason, "stale_build_seconds 86400")) {
				t.Errorf("kept %+v", r.Kept[0])
			}
			var left []string
			tmp, _ := os.ReadDir(d.path(dirTmp))
			for _, e := range tmp {
				left = append(left, e.Name())
			}
			q, _ := os.ReadDir(d.path(dirQuarantine))
			if !sameSet(left, tc.wantTmp) || len(q) != 1 {
				t.Fatalf("after gc: tmp %v, want %v; quarantine %v", left, tc.wantTmp, q)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
