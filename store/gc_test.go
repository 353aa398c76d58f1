package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestGC(t *testing.T) {
	d, err := Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	idA, idB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	mk := func(p string) {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, "f"), make([]byte, 100), 0o600)
	}
	mk(d.path(dirTmp, idA+".dead"))                                             // a dead builder's temp build
	mk(d.path(dirTmp, ".cleanup."+idA+".x"))                                    // an interrupted removal
	mk(d.path(dirTmp, idB+".alive"))                                            // a live builder's temp build
	mk(d.path(dirQuarantine, idA+".1000"))                                      // quarantined long ago
	mk(d.path(dirQuarantine, fmt.Sprintf("%s.%d", idB, time.Now().UnixNano()))) // just now
	os.WriteFile(d.path(dirDeny, idA), []byte("{}"), 0o644)                     // marker of an absent entry
	live, ok, err := tryLock(d.ownerLockPath(idB, "build"), unix.LOCK_EX)
	if !ok || err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	r, err := d.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := GCReport{Temps: Usage{1, 100}, Tombstones: Usage{1, 100}, Quarantined: Usage{1, 100}, DenyMarkers: 1}
	if *r != want {
		t.Fatalf("gc report %+v, want %+v", *r, want)
	}
	tmp, _ := os.ReadDir(d.path(dirTmp))
	q, _ := os.ReadDir(d.path(dirQuarantine))
	if len(tmp) != 1 || tmp[0].Name() != idB+".alive" || len(q) != 1 {
		t.Fatalf("after gc: tmp %v, quarantine %v", tmp, q)
	}
}
