package snapshotter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// refetchingResolver stands in for a registry: a resolution the store
// cannot answer imports the checkpoint src into the store, then resolves
// again.
type refetchingResolver struct {
	Resolver
	t       testing.TB
	dom     *store.Domain
	src     string
	fetches int
}

func (r *refetchingResolver) Resolve(ctx context.Context, req resolve.Request) (*resolve.Resolution, error) {
	res, err := r.Resolver.Resolve(ctx, req)
	if err == nil {
		return res, nil
	}
	r.fetches++
	importInto(r.t, r.dom, r.src)
	return r.Resolver.Resolve(ctx, req)
}

// TestPrepareRecoversFromAnInvalidFile: a store file truncated after its
// publication is found when a weight layer's Prepare builds a new view;
// the Prepare lets the lease go, fetches the artifact again and commits
// the layer with the source's exact bytes. A later Prepare gets the new
// lease, never the one that found the file invalid.
func TestPrepareRecoversFromAnInvalidFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		truncate int  // the store file truncated: 0 is the one a view's origin names
		held     bool // a container over another layer of the artifact holds its lease
	}{
		{"first file truncated", 0, false},
		{"last file truncated", -1, false},
		{"last file truncated, lease held", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			n := newNode(t, t.TempDir())
			src := storetest.Synth(t, synth.Options{Size: 256 << 10, Shards: 3, DType: "BF16", Seed: 71})
			id := importInto(t, n.dom, src)
			rr := &refetchingResolver{Resolver: n.resolver, t: t, dom: n.dom, src: src}
			n.sn.leases.resolver = rr
			if tc.held {
				n.prepareWeights(t, "extract-other", "", weightLabels(id, "/other", chainID(70)))
				if _, err := n.sn.Prepare(ctx, "holder", chainID(70)); err != nil {
					t.Fatal(err)
				}
			}

			l, err := n.dom.Lookup(ctx, artifact.MustParseID(id), store.ManifestAndMetadata)
			if err != nil {
				t.Fatal(err)
			}
			files := l.Files()
			f := files[(tc.truncate+len(files))%len(files)]
			if err := os.Chmod(f.Abs, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f.Abs, f.Entry.Size/2); err != nil {
				t.Fatal(err)
			}
			l.Close()

			n.prepareWeights(t, "extract", "", weightLabels(id, "/w", chainID(71)))
			if rr.fetches != 1 {
				t.Fatalf("fetches %d, want 1: the Prepare fetches the artifact again", rr.fetches)
			}
			dir, err := committedDir(ctx, n.sn.overlay, chainID(71))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				have, err := os.ReadFile(filepath.Join(dir, "w", f.Path))
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(src, f.Path))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(have, want) {
					t.Fatalf("%s in the weight snapshot: %d bytes, not the source's %d", f.Path, len(have), len(want))
				}
			}
			n.viewLinksStore(t, id, filepath.Join(dir, "w"))

			// A container over the layer takes the held lease: the one
			// fetched again, whose files are whole.
			if _, err := n.sn.Prepare(ctx, "container", chainID(71)); err != nil {
				t.Fatal(err)
			}
			n.sn.leases.mu.Lock()
			h := n.sn.leases.held[artifact.MustParseID(id)]
			n.sn.leases.mu.Unlock()
			if h == nil || h.lease.Invalid() {
				t.Fatalf("held lease after the recovery: %+v, want the lease fetched again", h)
			}
			for i := range h.lease.Index.Files {
				if _, err := h.lease.File(ctx, i); err != nil {
					t.Fatalf("the held lease's file %d: %v", i, err)
				}
			}
			if err := n.sn.Remove(ctx, "container"); err != nil && !errdefs.IsNotFound(err) {
				t.Fatal(err)
			}
		})
	}
}
