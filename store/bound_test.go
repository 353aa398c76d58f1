package store_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"github.com/zeebo/blake3"
)

// treeFetch is a producer that writes the files of a leased artifact the
// way a peer fetch does: every file created with BindTree from the sender's
// entry, every part written by WriteAt from its own goroutine, last part
// first, and its BLAKE3 reported; corrupt names a part reported wrongly,
// lieSHA a file whose sha256 the sender's entry gets wrong.
func treeFetch(l *store.Lease, corrupt, lieSHA string) artifact.Producer {
	return artifact.ProducerFunc{ProducerName: "tree-fetch", Fn: func(ctx context.Context, w artifact.Writer) error {
		for _, lf := range l.Files() {
			e := lf.Entry
			data, err := lf.Data()
			if err != nil {
				return err
			}
			if e.Path == lieSHA {
				e.SHA256 = strings.Repeat("5", 64)
			}
			fw, err := w.CreateBound(artifact.Binding{Want: e, By: artifact.BindTree})
			if err != nil {
				return err
			}
			type part struct {
				name     string
				off, end int64
			}
			parts := []part{{"", 0, e.Size}}
			if artifact.IsSafetensors(e.Path) {
				parts = []part{{"", 0, e.DataStart}} // the header: written, not reported
				for _, t := range e.Tensors {
					parts = append(parts, part{t.Name, t.Offset, t.Offset + t.Length})
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(parts))
			for i := len(parts) - 1; i >= 0; i-- {
				wg.Go(func() {
					p := parts[i]
					if _, errs[i] = fw.WriteAt(data[p.off:p.end], p.off); errs[i] != nil || (i == 0 && artifact.IsSafetensors(e.Path)) {
						return
					}
					sum := blake3.Sum256(data[p.off:p.end])
					if p.name == corrupt && corrupt != "" {
						sum[0] ^= 1
					}
					idx := i
					if artifact.IsSafetensors(e.Path) {
						idx = i - 1
					}
					errs[i] = fw.SetPartBLAKE3(idx, sum)
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if err := fw.Close(); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestTreeBoundFilesOutOfOrder: files filled by positioned writes in any
// order are published with the sender's digests, bound by the tree of the
// reported parts, and pass a full check; a wrongly reported part names the
// tensor and publishes nothing.
func TestTreeBoundFilesOutOfOrder(t *testing.T) {
	_, src := storetest.Checkpoint(t, 3<<20, 2)
	l, _ := importDir(t, storetest.Open(t), src)
	defer l.Close()
	ctx := context.Background()

	d := storetest.Open(t)
	got, res, err := d.GetOrBuild(ctx, l.Identity(), treeFetch(l, "", ""))
	if err != nil || !res.Built {
		t.Fatalf("tree-bound build: %v", err)
	}
	got.Close()
	full, err := d.Lookup(ctx, l.ID, store.FullChecksum)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for i, lf := range full.Files() {
		if err := artifact.CompareEntry(l.Files()[i].Entry, lf.Entry); err != nil {
			t.Fatal(err)
		}
	}

	var victim string
	for _, e := range l.Index.Files {
		if len(e.Tensors) > 0 {
			victim = e.Tensors[len(e.Tensors)-1].Name
		}
	}
	d2 := storetest.Open(t)
	_, _, err = d2.GetOrBuild(ctx, l.Identity(), treeFetch(l, victim, ""))
	var em *artifact.EntryMismatchError
	if !errors.As(err, &em) || em.Tensor != victim {
		t.Fatalf("a wrongly reported tensor: %v, want a mismatch naming %s", err, victim)
	}
	if list, _ := d2.List(ctx); len(list) != 0 {
		t.Fatal("an artifact was published")
	}
}

// TestScrubFindsABoundLie: a sender's sha256 that disagrees with the bytes
// its tree binds passes a full check (BLAKE3) and is found by the scrub,
// which recomputes every recorded digest and denies the artifact. (The
// identity is not a passthrough one, whose fingerprint would catch the lie
// at the build.)
func TestScrubFindsABoundLie(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 1)
	sender := storetest.Open(t)
	l, _ := importDir(t, sender, src)
	defer l.Close()
	ctx := context.Background()
	victim := l.Index.Files[len(l.Index.Files)-1].Path
	id := l.Identity()
	id.Producer.Name = "tree-fetch"
	d := storetest.Open(t)
	got, _, err := d.GetOrBuild(ctx, id, treeFetch(l, "", victim))
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	full, err := d.Lookup(ctx, got.ID, store.FullChecksum)
	if err != nil {
		t.Fatalf("full check: %v", err)
	}
	full.Close()
	err = d.Scrub(ctx, got.ID, store.ScrubOptions{Rate: 64 << 20})
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.File != victim || !strings.Contains(inv.Reason, "sha256") {
		t.Fatalf("scrub: %v, want an InvalidError naming %s's sha256", err, victim)
	}
	var de *store.DeniedError
	if _, err := d.Lookup(ctx, got.ID, ""); !errors.As(err, &de) {
		t.Fatalf("lookup after the scrub: %v, want denied", err)
	}
	if err := sender.Scrub(ctx, l.ID, store.ScrubOptions{}); err != nil {
		t.Fatalf("scrub of a true artifact: %v", err)
	}
}

// TestSchema1ArtifactStillVerifies: an artifact published with index schema
// 1 (whole-file BLAKE3; testdata/schema1, written by the previous release)
// passes a full check, and a flipped tensor byte is still found.
func TestSchema1ArtifactStillVerifies(t *testing.T) {
	const id = "43b8d0754f1087a877af6bd18fa516045e3aeb3b297ac615e485f15c278d86f0"
	sid := artifact.MustParseID("sha256:" + id)
	d := storetest.Open(t)
	dst := filepath.Join(d.Root(), "artifacts", id)
	copyDir(t, filepath.Join("testdata", "schema1", id), dst)
	l, err := d.Lookup(context.Background(), sid, store.FullChecksum)
	if err != nil {
		t.Fatalf("full check of a schema-1 artifact: %v", err)
	}
	if l.Index.Schema != artifact.IndexSchemaWholeFile {
		t.Fatalf("schema %d", l.Index.Schema)
	}
	var target artifact.FileEntry
	for _, e := range l.Index.Files {
		if len(e.Tensors) > 0 {
			target = e
		}
	}
	l.Close()
	tensor := target.Tensors[len(target.Tensors)-1]
	flipByte(t, filepath.Join(dst, target.Path), tensor.Offset)
	_, err = d.Lookup(context.Background(), sid, store.FullChecksum)
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Tensor != tensor.Name {
		t.Fatalf("flipped byte in a schema-1 artifact: %v", err)
	}
}

// copyDir copies a fixture artifact into a domain with the hardened modes.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		in, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(to, e.Name()), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err == nil {
			_, err = io.Copy(out, in)
			out.Close()
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(to, 0o555); err != nil {
		t.Fatal(err)
	}
}

// TestPassthroughIdentityMustMatchItsFiles: a producer whose files disagree
// with the source fingerprint of the passthrough identity it builds (here a
// fetch of another artifact's files) publishes nothing: an identity collision.
func TestPassthroughIdentityMustMatchItsFiles(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 1)
	l, _ := importDir(t, storetest.Open(t), src)
	defer l.Close()
	forged := l.Identity()
	forged.Model.Source = append([]artifact.SourceFile(nil), forged.Model.Source...)
	forged.Model.Source[0].SHA256 = strings.Repeat("7", 64)
	d := storetest.Open(t)
	_, _, err := d.GetOrBuild(context.Background(), forged, treeFetch(l, "", ""))
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "passthrough identity's source fingerprint and payload disagree") {
		t.Fatalf("build of a forged passthrough identity: %v", err)
	}
	if list, _ := d.List(context.Background()); len(list) != 0 {
		t.Fatal("an artifact was published")
	}
}
