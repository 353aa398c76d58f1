package store_test

import (
	"context"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// BenchmarkImport publishes a 512 MiB, 4-shard checkpoint into a fresh
// store per iteration in a single pass, as weightsnap import does on a cold
// source, with the source warm in the page cache.
func BenchmarkImport(b *testing.B) {
	dir, _ := storetest.Checkpoint(b, 512<<20, 4)
	ctx := context.Background()
	b.SetBytes(512 << 20)
	for b.Loop() {
		d := storetest.Open(b)
		src, err := artifact.ListSource(dir)
		if err != nil {
			b.Fatal(err)
		}
		l, _, err := d.Import(ctx, &artifact.Passthrough{Src: src}, func(files []artifact.FileEntry) (artifact.Identity, error) {
			full, err := src.WithDigests(files)
			if err != nil {
				return artifact.Identity{}, err
			}
			return artifact.PassthroughIdentity(full, "", storetest.Revision, "", 0, 0), nil
		})
		if err != nil {
			b.Fatal(err)
		}
		l.Close()
	}
}

// BenchmarkVerifyFull validates every payload byte of a warm 512 MiB artifact.
func BenchmarkVerifyFull(b *testing.B) {
	_, src := storetest.Checkpoint(b, 512<<20, 4)
	d := storetest.Open(b)
	l, _ := importDir(b, d, src)
	id := l.ID
	l.Close()
	b.SetBytes(l.Index.TotalBytes())
	for b.Loop() {
		l, err := d.Lookup(context.Background(), id, store.FullChecksum)
		if err != nil {
			b.Fatal(err)
		}
		l.Close()
	}
}
