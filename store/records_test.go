package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestSignatureRecords: an artifact's signature record is written
// atomically beside it and read back bounded; rm and eviction remove it
// with the artifact; gc removes the record of an absent artifact once it is old,
// and keeps a young one (a build planning it).
func TestSignatureRecords(t *testing.T) {
	ctx := context.Background()
	d := storetest.Open(t)
	_, src := storetest.Checkpoint(t, 64<<10, 1)
	l, _ := importDir(t, d, src)
	l.Close()
	if raw, err := d.Records(l.ID); err != nil || raw != nil {
		t.Fatalf("no record yet: %q %v", raw, err)
	}
	put := func(id artifact.ID, raw []byte) {
		t.Helper()
		if err := d.EditRecords(ctx, id, func([]byte) ([]byte, error) { return raw, nil }); err != nil {
			t.Fatal(err)
		}
	}
	put(l.ID, []byte(`{"schema":1}`))
	if raw, err := d.Records(l.ID); err != nil || string(raw) != `{"schema":1}` {
		t.Fatalf("record: %q %v", raw, err)
	}
	if err := d.EditRecords(ctx, l.ID, func([]byte) ([]byte, error) { return make([]byte, artifact.MaxRecordsBytes+1), nil }); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("an oversized record: %v", err)
	}
	if err := d.Remove(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if raw, err := d.Records(l.ID); err != nil || raw != nil {
		t.Fatalf("record after rm: %q %v", raw, err)
	}
	// So does eviction.
	l, _ = importDir(t, d, src)
	l.Close()
	put(l.ID, []byte(`{"schema":1}`))
	if ev, err := d.Evict(ctx, l.ID, "manual"); err != nil || ev.ID != l.ID {
		t.Fatalf("evict: %+v %v", ev, err)
	}
	if raw, err := d.Records(l.ID); err != nil || raw != nil {
		t.Fatalf("record after eviction: %q %v", raw, err)
	}

	old, _ := artifact.ParseIDHex(strings.Repeat("1", 64))
	young, _ := artifact.ParseIDHex(strings.Repeat("2", 64))
	put(old, []byte("{}"))
	put(young, []byte("{}"))
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(d.Root(), "signatures", old.Hex()+".json"), past, past); err != nil {
		t.Fatal(err)
	}
	r, err := d.GC(ctx, store.GCOptions{})
	if err != nil || r.Signatures != 1 {
		t.Fatalf("gc removed %d records (%v), want the old orphan", r.Signatures, err)
	}
	if raw, _ := d.Records(old); raw != nil {
		t.Fatal("the old orphan record is still there")
	}
	if raw, _ := d.Records(young); raw == nil {
		t.Fatal("gc removed a young record")
	}
}
