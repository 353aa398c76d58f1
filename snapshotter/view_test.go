package snapshotter

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/dirfd"
	"github.com/weightsnap/weightsnap/internal/fanout"
	"github.com/weightsnap/weightsnap/store"
)

// TestViewLinkAll: a view of a model of hundreds of files in many folders,
// linked by several goroutines, has every file at its path as the store's
// very inode, the second time too (over the first), and the lease opened
// none of the files.
func TestViewLinkAll(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := importInto(t, n.dom, manyFilesModel(t, 400))
	l, err := n.dom.Hold(ctx, artifact.MustParseID(id), store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Index.Files) < 2*fanout.MinRun {
		t.Fatalf("%d files: too few for more than one linker", len(l.Index.Files))
	}
	linker, err := l.Linker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer linker.Close()
	link := func(dirfd int, name string, i int) error { return linker.Link(ctx, i, dirfd, name) }
	root := filepath.Join(t.TempDir(), "view")
	for range 2 {
		dirs := dirfd.New()
		err := linkAll(dirs, root, l.Index.Files, link)
		dirs.Close()
		if err != nil {
			t.Fatal(err)
		}
		n.viewLinksStore(t, id, root)
	}
	if got := l.Files(); got != nil {
		t.Fatalf("the view opened %d of the lease's files", len(got))
	}
}
