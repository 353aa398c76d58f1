package store_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

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
	got, res, err := d.GetOrBuild(ctx, l.Identity(), storetest.TreeFetch(l, "", "", false))
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
	_, _, err = d2.GetOrBuild(ctx, l.Identity(), storetest.TreeFetch(l, victim, "", false))
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
	got, _, err := d.GetOrBuild(ctx, id, storetest.TreeFetch(l, "", victim, false))
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

// TestTreeBoundSHA256Checked: with CheckSHA256 (a fetch whose trust rests
// on a signature record, which binds sha256) a sender's sha256 that
// disagrees with the bytes its tree binds is refused at Close, naming the
// file, and nothing is published; a true one builds.
func TestTreeBoundSHA256Checked(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	l, _ := importDir(t, storetest.Open(t), src)
	defer l.Close()
	ctx := context.Background()
	id := l.Identity()
	id.Producer.Name = "tree-fetch" // not a passthrough identity, whose fingerprint would catch the lie
	for _, victim := range []string{"", l.Index.Files[0].Path, l.Index.Files[len(l.Index.Files)-1].Path} {
		t.Run("lie "+victim, func(t *testing.T) {
			d := storetest.Open(t)
			got, _, err := d.GetOrBuild(ctx, id, storetest.TreeFetch(l, "", victim, true))
			if victim == "" {
				if err != nil {
					t.Fatal(err)
				}
				got.Close()
				return
			}
			var em *artifact.EntryMismatchError
			if !errors.As(err, &em) || em.Path != victim || em.Field != "sha256" || !errdefs.IsDataLoss(err) {
				t.Fatalf("a sender's false sha256: %v, want a sha256 mismatch naming %s", err, victim)
			}
			if list, _ := d.List(ctx); len(list) != 0 {
				t.Fatal("an artifact was published")
			}
		})
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
	_, _, err := d.GetOrBuild(context.Background(), forged, storetest.TreeFetch(l, "", "", false))
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "passthrough identity's source fingerprint and payload disagree") {
		t.Fatalf("build of a forged passthrough identity: %v", err)
	}
	if list, _ := d.List(context.Background()); len(list) != 0 {
		t.Fatal("an artifact was published")
	}
}
