package peer

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestExportCeiling: exported directories stay mapped within the ceiling:
// an idle one is dropped to make room, one larger than the ceiling is
// refused, and a directory whose files changed is mapped again.
func TestExportCeiling(t *testing.T) {
	a, _ := storetest.Checkpoint(t, 6<<20, 1)
	b, _ := storetest.Checkpoint(t, 6<<20, 2)
	big, _ := storetest.Checkpoint(t, 12<<20, 1)
	_, addr := serve(t, storetest.Open(t), ServerConfig{ExportCeiling: 10 << 20, Exports: []Export{
		{Name: "a", Path: a, Revision: storetest.Revision}, {Name: "b", Path: b, Revision: storetest.Revision}, {Name: "big", Path: big, Revision: storetest.Revision}}})
	fetch := func(name string) (*FetchReport, error) {
		l, rep, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, "staged:"+name, FetchOptions{})
		if err == nil {
			l.Close()
		}
		return rep, err
	}
	staged := func() map[string]bool {
		ls, err := (ClientConfig{}).List(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, s := range ls.Exports {
			m[s.Name] = s.Mapped
		}
		return m
	}
	first, err := fetch("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch("b"); err != nil {
		t.Fatal(err)
	}
	if s := staged(); s["a"] || !s["b"] {
		t.Fatalf("staged %v: a should have made room for b", s)
	}
	if _, err := fetch("big"); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("a directory over the ceiling: %v", err)
	}
	// A file of a changes: the next session stages it again, with the new bytes.
	f := filepath.Join(a, "config.json")
	if err := os.WriteFile(f, []byte(`{"changed": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := fetch("a")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == first.ID {
		t.Fatal("a changed directory kept its identity")
	}
}
