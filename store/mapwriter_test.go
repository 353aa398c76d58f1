package store_test

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"github.com/zeebo/blake3"
)

// mappedFetch writes every file of l only through its mapping, as
// one-sided RDMA reads land, reporting each part's BLAKE3 from it.
func mappedFetch(l *store.Lease) artifact.Producer {
	return artifact.ProducerFunc{ProducerName: "mapped", Fn: func(ctx context.Context, w artifact.Writer) error {
		for _, lf := range l.Files() {
			e := lf.Entry
			fw, err := w.CreateBound(artifact.Binding{Want: e, By: artifact.BindTree})
			if err != nil {
				return err
			}
			m, err := fw.Map()
			if err != nil {
				return err
			}
			data, err := lf.Data()
			if err != nil {
				return err
			}
			copy(m, data)
			parts := []artifact.Sum{blake3.Sum256(m)}
			if artifact.IsSafetensors(e.Path) {
				parts = parts[:0]
				for _, x := range e.Tensors {
					parts = append(parts, blake3.Sum256(m[x.Offset:x.Offset+x.Length]))
				}
			}
			for i, p := range parts {
				if err := fw.SetPartBLAKE3(i, p); err != nil {
					return err
				}
			}
			if err := fw.Close(); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestMappedTreeFile: BindTree files written only through their mappings
// publish valid, each header taken from its mapping; an ordered file
// cannot be mapped.
func TestMappedTreeFile(t *testing.T) {
	_, src := storetest.Checkpoint(t, 3<<20, 2)
	l, _ := importDir(t, storetest.Open(t), src)
	defer l.Close()
	ctx := context.Background()
	d := storetest.Open(t)
	got, _, err := d.GetOrBuild(ctx, l.Identity(), mappedFetch(l))
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	full, err := d.Lookup(ctx, l.ID, store.FullChecksum)
	if err != nil {
		t.Fatal(err)
	}
	full.Close()

	_, _, err = storetest.Open(t).GetOrBuild(ctx, l.Identity(), artifact.ProducerFunc{ProducerName: "ordered",
		Fn: func(ctx context.Context, w artifact.Writer) error {
			fw, err := w.CreateBound(artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: "config.json", Size: 2}}})
			if err != nil {
				return err
			}
			_, err = fw.Map()
			return err
		}})
	if !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("mapping a file not bound by its tree: %v", err)
	}
}
