package oci

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestPullStopsCleanlyOnAFailedCreate: a pull whose store refuses the
// third large file (a capacity limit, as a full disk does) fails with the
// store's error while feeders still hand out ranges of the others and
// small files wait to be sent; it never panics on the closed job channel
// (it did: dispatch returned, and its caller closed the jobs, before the
// feeders stopped).
func TestPullStopsCleanlyOnAFailedCreate(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 24<<20, 4)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	limit := l.Index.TotalBytes() * 5 / 8 // two of the four shards
	for i := range 20 {
		d, err := store.Open(ctx, filepath.Join(t.TempDir(), "store"), &store.Policy{MaxArtifactBytes: bytefmt.Size(limit), Validation: store.ManifestAndMetadata, CoordinationTimeoutSeconds: 10})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = Pull(ctx, d, remoteFor(t, f, "models/x:v1"), PullOptions{Ranges: RangesOn, ChunkSize: 1 << 20, FilesInFlight: 2, Import: ImportOptions{Revision: storetest.Revision}})
		var ce *store.CapacityError
		if !errors.As(err, &ce) {
			t.Fatalf("pull %d into a store of %d bytes: %v, want a capacity error", i, limit, err)
		}
	}
}
