package oci

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
)

const testRevision = "0123456789abcdef0123456789abcdef01234567"

// checkpoint writes a synthetic checkpoint of about size bytes in shards.
func checkpoint(tb testing.TB, size int64, shards int) (string, *artifact.SourceDir) {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "ckpt")
	if err := synth.Write(context.Background(), dir, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: 7}); err != nil {
		tb.Fatal(err)
	}
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	return dir, src
}

func openStore(tb testing.TB) *store.Domain {
	tb.Helper()
	d, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "store"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// imported publishes src into a fresh store and returns the lease.
func imported(tb testing.TB, src *artifact.SourceDir) (*store.Domain, *store.Lease) {
	tb.Helper()
	d := openStore(tb)
	l, _, err := d.GetOrBuild(context.Background(), artifact.PassthroughIdentity(src, "org/model", testRevision, "", 0, 0), &artifact.Passthrough{Src: src})
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
		if !bytes.Equal(lf.Data, want.Files()[i].Data) {
			tb.Fatalf("%s differs", lf.Path)
		}
	}
}
