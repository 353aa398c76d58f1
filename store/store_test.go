package store_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

func importDir(t testing.TB, d *store.Domain, src *artifact.SourceDir) (*store.Lease, store.BuildResult) {
	t.Helper()
	id := storetest.Identity(src)
	l, res, err := d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: src})
	if err != nil {
		t.Fatal(err)
	}
	return l, res
}

func TestLeaseTensorsEqualSource(t *testing.T) {
	dir, src := storetest.Checkpoint(t, 4<<20, 3)
	d := storetest.Open(t)
	l, res := importDir(t, d, src)
	defer l.Close()
	if !res.Built {
		t.Fatal("first import did not build")
	}
	checked := 0
	for _, sf := range src.Files {
		raw, err := os.ReadFile(filepath.Join(dir, sf.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !artifact.IsSafetensors(sf.Path) {
			continue
		}
		h, err := artifact.ReadHeader(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range h.Tensors {
			got, e, err := l.Tensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := raw[h.DataStart()+ti.Begin : h.DataStart()+ti.End]
			if !bytes.Equal(got, want) || e.DType != ti.DType {
				t.Fatalf("tensor %s differs from the source", ti.Name)
			}
			checked++
		}
	}
	if checked == 0 || checked != l.Index.TensorCount() {
		t.Fatalf("checked %d tensors, index has %d", checked, l.Index.TensorCount())
	}
	// A second build of the same identity is a hit.
	l2, res2 := importDir(t, d, src)
	defer l2.Close()
	if res2.Built || l2.ID != l.ID {
		t.Fatalf("second import built=%v id=%s, want a hit on %s", res2.Built, l2.ID, l.ID)
	}
}

func TestRemoveLeasedArtifactReportsLease(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	d := storetest.Open(t)
	l, _ := importDir(t, d, src)
	err := d.Remove(context.Background(), l.ID)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "has an active lease") {
		t.Fatalf("remove of a leased artifact: %v, want a busy lease", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf(" held by pid %d ", os.Getpid())) {
		t.Fatalf("busy error %q does not name this process as the first holder", err)
	}
	for _, f := range l.Files() {
		if _, err := os.Stat(f.Abs); err != nil {
			t.Fatalf("payload unlinked while leased: %v", err)
		}
	}
	l.Close()
	if err := d.Remove(context.Background(), l.ID); err != nil {
		t.Fatalf("remove after close: %v", err)
	}
	if _, err := d.Lookup(context.Background(), l.ID, ""); !errors.Is(err, store.ErrMiss) {
		t.Fatalf("lookup after remove: %v, want a miss", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(entries) != 0 {
		t.Fatalf("tmp not empty after remove: %v", entries)
	}
}

func TestFlippedByteIsDeniedByFullChecksum(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	d := storetest.Open(t)
	l, _ := importDir(t, d, src)
	id := l.ID
	var f *store.LeaseFile
	for _, lf := range l.Files() {
		if len(lf.Entry.Tensors) > 0 {
			f = lf
		}
	}
	tensor := f.Entry.Tensors[len(f.Entry.Tensors)/2]
	off := tensor.Offset + tensor.Length/2
	l.Close()
	flipByte(t, f.Abs, off)

	// The metadata check cannot see it; the full checksum names file and tensor.
	if l, err := d.Lookup(context.Background(), id, store.ManifestAndMetadata); err != nil {
		t.Fatalf("metadata lookup: %v", err)
	} else {
		l.Close()
	}
	_, err := d.Lookup(context.Background(), id, store.FullChecksum)
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.File != f.Path || inv.Tensor != tensor.Name || !errdefs.IsDataLoss(err) {
		t.Fatalf("full checksum: %v, want an InvalidError naming %s and %s", err, f.Path, tensor.Name)
	}
	for _, mode := range []store.ValidationMode{store.ManifestAndMetadata, store.FullChecksum} {
		_, err := d.Lookup(context.Background(), id, mode)
		var de *store.DeniedError
		if !errors.As(err, &de) || !errors.Is(err, store.ErrMiss) {
			t.Fatalf("%s lookup after deny: %v, want a denied miss", mode, err)
		}
	}
	// A build of the same identity quarantines the bad copy and publishes a good one.
	l2, res := importDir(t, d, src)
	defer l2.Close()
	if !res.Built || l2.ID != id {
		t.Fatalf("rebuild after deny: built=%v", res.Built)
	}
	if q, _ := os.ReadDir(filepath.Join(d.Root(), "quarantine")); len(q) != 1 {
		t.Fatalf("quarantine holds %d entries, want 1", len(q))
	}
}

// flipByte inverts one byte of a hardened file and restores its mode.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	dir := filepath.Dir(path)
	os.Chmod(dir, 0o755)
	os.Chmod(path, 0o644)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Chmod(path, 0o444)
	os.Chmod(dir, 0o555)
}

func TestUnsupportedFilesystemIsNamed(t *testing.T) {
	_, err := store.Open(context.Background(), "/proc/self", nil)
	var ufs *store.UnsupportedFSError
	if err == nil {
		t.Fatal("a store under /proc was accepted")
	}
	// MkdirAll of /proc/self succeeds (it exists); statfs names the type.
	if !errors.As(err, &ufs) || ufs.Type != "proc" {
		t.Fatalf("store under /proc: %v, want an UnsupportedFSError naming proc", err)
	}
}

// TestIdentityMismatchedSourceFails: a source file that changed after its
// fingerprint was taken fails the import, whichever file it is (the
// largest is copied first, the smallest last, the others opened and
// created ahead of it), leaves no artifact and no temp entry, and every
// file the import opened is closed.
func TestIdentityMismatchedSourceFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard func(files []artifact.SourceFile) artifact.SourceFile
	}{
		{"largest", func(files []artifact.SourceFile) artifact.SourceFile {
			return slices.MaxFunc(files, func(a, b artifact.SourceFile) int { return cmp.Compare(a.Size, b.Size) })
		}},
		{"smallest", func(files []artifact.SourceFile) artifact.SourceFile {
			return slices.MinFunc(files, func(a, b artifact.SourceFile) int { return cmp.Compare(a.Size, b.Size) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, src := storetest.Checkpoint(t, 4<<20, 6)
			d := storetest.Open(t)
			p := filepath.Join(dir, tc.shard(src.Files).Path)
			raw, _ := os.ReadFile(p)
			raw[len(raw)-1] ^= 1
			os.WriteFile(p, raw, 0o644)
			fds := openFiles(t)
			id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
			_, _, err := d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: src})
			var mm *artifact.SourceMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("import of a changed source: %v, want a SourceMismatchError", err)
			}
			if list, _ := d.List(context.Background()); len(list) != 0 {
				t.Fatalf("a failed build left %d artifacts", len(list))
			}
			if entries, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(entries) != 0 {
				t.Fatalf("a failed build left temp entries: %v", entries)
			}
			if now := openFiles(t); now > fds {
				t.Fatalf("a failed build left %d more files open", now-fds)
			}
		})
	}
}

// openFiles counts this process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// holdBuild starts a build of id from src whose producer blocks, holding
// the build lock, until release is closed; done gives the build's error.
// It returns once the producer runs.
func holdBuild(d *store.Domain, id artifact.Identity, src *artifact.SourceDir) (release chan struct{}, done chan error) {
	started := make(chan struct{})
	release, done = make(chan struct{}), make(chan error, 1)
	go func() {
		l, _, err := d.GetOrBuild(context.Background(), id, artifact.ProducerFunc{ProducerName: "slow", Fn: func(ctx context.Context, w artifact.Writer) error {
			close(started)
			<-release
			return (&artifact.Passthrough{Src: src}).Produce(ctx, w)
		}})
		if err == nil {
			l.Close()
		}
		done <- err
	}()
	<-started
	return release, done
}

func TestLockWaitEndsAtTheCallersDeadline(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	d := storetest.Open(t)
	id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	// A producer that blocks holds the build lock; a second builder with a
	// short deadline gets a typed, retryable timeout and leaves it alone.
	release, done := holdBuild(d, id, src)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := d.GetOrBuild(ctx, id, &artifact.Passthrough{Src: src})
	var te *store.TimeoutError
	if !errors.As(err, &te) || !te.Retryable() {
		t.Fatalf("waiter past its deadline: %v, want a retryable TimeoutError", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first build was disturbed by the waiter: %v", err)
	}
}

func TestCancelledChecksumLeavesTheArtifactReady(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	d := storetest.Open(t)
	l, _ := importDir(t, d, src)
	id := l.ID
	f := l.Files()[0]
	l.Close()
	flipByte(t, f.Abs, f.Entry.Size-1)

	// A cancelled full checksum, in a lookup or a scrub, is the caller's
	// cancellation, never a finding: the artifact is neither denied nor moved.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Lookup(ctx, id, store.FullChecksum); !errors.Is(err, context.Canceled) || store.IsInvalid(err) {
		t.Fatalf("cancelled full lookup: %v, want context.Canceled", err)
	}
	if err := d.Scrub(ctx, id, store.ScrubOptions{}); !errors.Is(err, context.Canceled) || store.IsInvalid(err) {
		t.Fatalf("cancelled scrub: %v, want context.Canceled", err)
	}
	info, err := d.InspectArtifact(context.Background(), id)
	if err != nil || info.State != store.StateReady {
		t.Fatalf("after cancelled checks: %+v %v, want %s", info, err, store.StateReady)
	}
	// The flipped byte is still there to be found by a check that runs.
	if _, err := d.Lookup(context.Background(), id, store.FullChecksum); !store.IsInvalid(err) {
		t.Fatalf("full lookup: %v, want invalid", err)
	}
}

// TestOpenExisting: a root without a store is not found and stays as it
// was (nothing created, not even the directory); one Open made opens.
func TestOpenExisting(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	for i, prepare := range []func() error{func() error { return nil }, func() error { return os.MkdirAll(root, 0o755) }} {
		if err := prepare(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(root); (i == 0) != errors.Is(err, os.ErrNotExist) {
			t.Fatalf("root %s: %v", root, err)
		}
		before, _ := os.ReadDir(root)
		if _, err := store.OpenExisting(ctx, root, nil); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "no store at "+root) {
			t.Fatalf("OpenExisting of a root without a store: %v, want not found naming it", err)
		}
		if after, err := os.ReadDir(root); len(after) != len(before) || (i == 0) != errors.Is(err, os.ErrNotExist) {
			t.Fatalf("OpenExisting created %v (%v)", after, err)
		}
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(ctx, root, nil); err != nil {
		t.Fatal(err)
	}
	d, err := store.OpenExisting(ctx, root, nil)
	if err != nil || d.Created() {
		t.Fatalf("OpenExisting of a store: %v (created %v)", err, d != nil && d.Created())
	}
}
