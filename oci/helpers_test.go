package oci

import (
	"bytes"
	"context"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// imported publishes src into a fresh store and returns the lease.
func imported(tb testing.TB, src *artifact.SourceDir) (*store.Domain, *store.Lease) {
	tb.Helper()
	d := storetest.Open(tb)
	l, _, err := d.GetOrBuild(context.Background(), storetest.Identity(src), &artifact.Passthrough{Src: src})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return d, l
}

// sameArtifact checks that got, pulled into d, passes a full verification
// and holds want's bytes, file by file.
func sameArtifact(tb testing.TB, d *store.Domain, got, want *store.Lease) {
	tb.Helper()
	full, err := d.Lookup(context.Background(), got.ID, store.FullChecksum)
	if err != nil {
		tb.Fatal(err)
	}
	full.Close()
	for i, lf := range got.Files() {
		if !bytes.Equal(storetest.Data(tb, lf), storetest.Data(tb, want.Files()[i])) {
			tb.Fatalf("%s differs", lf.Path)
		}
	}
}
