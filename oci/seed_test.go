package oci

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestPullAnnouncesToAServedStore: a pull into a store that a process
// serves announces the artifact, headers included, before its payload, and
// each file's range is verified once its sha256 checked.
func TestPullAnnouncesToAServedStore(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 8<<20, 2)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	d := storetest.Open(t)
	peer, err := store.Open(ctx, d.Root(), nil) // the serving process's view
	if err != nil {
		t.Fatal(err)
	}
	release, err := peer.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var once sync.Once
	var doc []byte
	var berr error
	progress := func(int64) {
		once.Do(func() {
			b, err := peer.Building(ctx, l.ID)
			if err != nil {
				berr = err
				return
			}
			defer b.Close()
			doc = b.Document()
		})
	}
	got, _, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), PullOptions{Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if berr != nil {
		t.Fatalf("no build to follow while the pull ran: %v", berr)
	}
	var a artifact.Announcement
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &a); err != nil {
		t.Fatal(err)
	}
	if id, _ := a.Identity.ID(); id != l.ID || len(a.Files) != len(l.Index.Files) {
		t.Fatalf("announced %s with %d files, want %s with %d", id.Short(), len(a.Files), l.ID.Short(), len(l.Index.Files))
	}
	for i, e := range a.Files {
		if artifact.CompareEntry(l.Index.Files[i], e) != nil || int64(len(a.Headers[i])) != e.DataStart ||
			(e.DataStart > 0 && artifact.BLAKE3Hex(a.Headers[i]) != e.HeaderBLAKE3) {
			t.Fatalf("announced file %d (%s) differs from the index", i, e.Path)
		}
	}
}
