package oci

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/store"
)

// seedWriter is a MemWriter that serves what it builds: it keeps the
// chaining values recorded for each unit and each range recorded verified,
// with how many bytes of its file were written when it was recorded.
type seedWriter struct {
	storetest.MemWriter

	mu       sync.Mutex
	pieces   map[string][][32]byte // by unitKey
	verified []seedRange
	written  map[string]int64
}

// seedRange is a range recorded verified, and the bytes of its file
// written at that moment.
type seedRange struct {
	path         string
	off, n       int64
	writtenUntil int64
}

func unitKey(path string, off, n int64) string { return fmt.Sprintf("%s@%d+%d", path, off, n) }

func (w *seedWriter) Seeding() bool         { return true }
func (w *seedWriter) Announce([]byte) error { return nil }
func (w *seedWriter) Source(int) error      { return nil }

func (w *seedWriter) Pieces(path string, off, n int64, cvs [][32]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pieces == nil {
		w.pieces = map[string][][32]byte{}
	}
	w.pieces[unitKey(path, off, n)] = cvs
	return nil
}

func (w *seedWriter) Verified(path string, off, n int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.verified = append(w.verified, seedRange{path, off, n, w.written[path]})
	return nil
}

// CreateBound creates an in-memory file that counts its bytes written.
func (w *seedWriter) CreateBound(b artifact.Binding) (artifact.BoundFileWriter, error) {
	fw, err := w.Create(b.Want.Path, b.Want.Size)
	if err != nil {
		return nil, err
	}
	return &seedFile{FileWriter: fw, w: w, path: b.Want.Path}, nil
}

// seedFile is a seedWriter's file, written in order only; it takes
// writes from several goroutines, as the store's does.
type seedFile struct {
	artifact.FileWriter
	w    *seedWriter
	path string
	mu   sync.Mutex
}

func (f *seedFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.FileWriter.Write(p)
	f.w.mu.Lock()
	if f.w.written == nil {
		f.w.written = map[string]int64{}
	}
	f.w.written[f.path] += int64(n)
	f.w.mu.Unlock()
	return n, err
}

// WriteBuffer writes b and gives it back at once.
func (f *seedFile) WriteBuffer(b []byte, done func()) error {
	defer done()
	_, err := f.Write(b)
	return err
}

func (f *seedFile) WriteAt([]byte, int64) (int, error)    { return 0, errdefs.ErrNotImplemented }
func (f *seedFile) SetPartBLAKE3(int, artifact.Sum) error { return errdefs.ErrNotImplemented }
func (f *seedFile) Map() ([]byte, error)                  { return nil, errdefs.ErrNotImplemented }

// pullSeeding runs a pull of r into w as a node that serves what it pulls.
func pullSeeding(t *testing.T, r *registry.Remote, w *seedWriter) error {
	t.Helper()
	ctx := context.Background()
	res, err := resolveManifest(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planRemote(ctx, r, res.Manifest, ImportOptions{})
	if err != nil {
		return err
	}
	return newPuller(r, plan, PullOptions{}).Produce(ctx, w)
}

// piecesSource is a lease of a checkpoint with units longer than a piece,
// and those units.
func piecesSource(t *testing.T) (*store.Lease, []pieceUnit) {
	t.Helper()
	_, src := storetest.CheckpointOf(t, synth.Options{Size: 12 << 20, Shards: 2, DType: "BF16", Seed: 7, Vocab: 8192})
	_, l := imported(t, src)
	us := pieceUnits(l.Index.Files)
	if len(us) < 2 {
		t.Fatalf("%d units longer than a piece", len(us))
	}
	return l, us
}

// TestPushPullPieces: push writes a pieces layer of the size the index
// gives; a pull that serves what it pulls records each long unit's
// chaining values and each of its pieces verified on its own once written;
// the bytes are the source's, in memory and in a served store.
func TestPushPullPieces(t *testing.T) {
	ctx := context.Background()
	l, us := piecesSource(t)
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "models/x:v1")
	if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := resolveManifest(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	if desc, ok := PiecesLayer(res.Manifest); !ok || desc.Size != piecesSize(us) {
		t.Fatalf("pieces layer %v (%v), want %d bytes", desc, ok, piecesSize(us))
	}
	w := &seedWriter{}
	if err := pullSeeding(t, r, w); err != nil {
		t.Fatal(err)
	}
	for _, lf := range l.Files() {
		if got, _ := w.Bytes(lf.Path); !bytes.Equal(got, storetest.Data(t, lf)) {
			t.Fatalf("%s pulled differs from the source", lf.Path)
		}
	}
	for _, u := range us {
		cvs := w.pieces[unitKey(u.path, u.off, u.n)]
		if sum := blake3.RootFromCVs(cvs); artifact.SumHex(sum) != u.blake3 {
			t.Fatalf("%s: recorded %d chaining values merging into %x, want %s", u.what(), len(cvs), sum, u.blake3)
		}
		for i := range blake3.Pieces(u.n) {
			at := i * blake3.PieceSize
			if !slices.ContainsFunc(w.verified, func(v seedRange) bool {
				return v.path == u.path && v.off == u.off+at && v.n == min(blake3.PieceSize, u.n-at)
			}) {
				t.Fatalf("%s: piece %d not recorded verified on its own", u.what(), i)
			}
		}
	}
	for _, v := range w.verified {
		if v.writtenUntil < v.off+v.n {
			t.Fatalf("%s [%d, %d) recorded verified with %d bytes written", v.path, v.off, v.off+v.n, v.writtenUntil)
		}
	}
	// The same pull into a store a process serves publishes the artifact.
	d := storetest.Open(t)
	release, err := d.Serving(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	got, _, err := Pull(ctx, d, r, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	sameArtifact(t, d, got, l)
}

// TestPullRefusesPiecesLayer: a pieces layer that disagrees with the index
// fails the pull before any payload byte is recorded verified, naming the
// unit where its chaining values do not merge into its BLAKE3; an artifact
// without one pulls, its files verified whole.
func TestPullRefusesPiecesLayer(t *testing.T) {
	l, us := piecesSource(t)
	good, err := hashPieces(context.Background(), l.Index.Files, func(path string) io.ReaderAt { return fileOf(l, path) })
	if err != nil {
		t.Fatal(err)
	}
	flipped := func(at int64) []byte {
		b := bytes.Clone(good)
		b[at] ^= 1
		return b
	}
	second := 32 * blake3.Pieces(us[0].n) // the second unit's first value
	for _, c := range []struct {
		name   string
		pieces []byte
		unit   *pieceUnit // the unit named, nil for a refusal of the layer as a whole
		err    func(error) bool
	}{
		{"none", nil, nil, nil},
		{"first unit", flipped(5), &us[0], errdefs.IsDataLoss},
		{"second unit", flipped(second + 31), &us[1], errdefs.IsDataLoss},
		{"short", good[:len(good)-32], nil, errdefs.IsDataLoss},
		{"long", append(bytes.Clone(good), make([]byte, 32)...), nil, errdefs.IsDataLoss},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &seedWriter{}
			err := pullSeeding(t, pushEdited(t, l, l.Identity(), l.Index, c.pieces, "models/x:v1"), w)
			if c.err == nil {
				if err != nil || len(w.pieces) != 0 || len(w.verified) != len(l.Index.Files) {
					t.Fatalf("pull without pieces: %v, %d units with pieces, %d ranges verified", err, len(w.pieces), len(w.verified))
				}
				return
			}
			if !c.err(err) || len(w.verified) != 0 {
				t.Fatalf("got %v with %d ranges verified", err, len(w.verified))
			}
			var em *artifact.EntryMismatchError
			if c.unit != nil && (!errors.As(err, &em) || em.Path != c.unit.path || em.Tensor != c.unit.tensor || !strings.Contains(em.Field, "pieces")) {
				t.Fatalf("got %v, want a mismatch naming %s", err, c.unit.what())
			}
		})
	}
}

// TestPullRefusesCorruptPiece: a registry serving a flipped byte in a
// piece fails the pull at that piece, naming its unit and index; the
// pieces before it were recorded verified, no byte of it or after it was.
func TestPullRefusesCorruptPiece(t *testing.T) {
	ctx := context.Background()
	l, us := piecesSource(t)
	u := slices.MaxFunc(us, func(a, b pieceUnit) int { return cmp.Compare(a.n, b.n) })
	if blake3.Pieces(u.n) < 3 {
		t.Fatalf("%s has %d pieces", u.what(), blake3.Pieces(u.n))
	}
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "models/x:v1")
	if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	var victim digest.Digest
	for _, fe := range l.Index.Files {
		if fe.Path == u.path {
			victim = digest.NewDigestFromEncoded(digest.SHA256, fe.SHA256)
		}
	}
	bad := u.off + 2*blake3.PieceSize + 77
	f.setCorrupt(func(d digest.Digest) int64 {
		if d == victim {
			return bad
		}
		return -1
	})
	w := &seedWriter{}
	err := pullSeeding(t, r, w)
	var em *artifact.EntryMismatchError
	if !errors.As(err, &em) || !errdefs.IsDataLoss(err) || em.Path != u.path || em.Tensor != u.tensor || !strings.Contains(em.Field, "piece 2") {
		t.Fatalf("got %v, want piece 2 of %s refused", err, u.what())
	}
	second := false
	for _, v := range w.verified {
		if v.path == u.path && v.off+v.n > u.off+2*blake3.PieceSize && v.off < u.off+u.n {
			t.Fatalf("[%d, %d) of %s recorded verified past the corrupt piece", v.off, v.off+v.n, u.path)
		}
		second = second || (v.path == u.path && v.off == u.off+blake3.PieceSize)
	}
	if !second {
		t.Fatalf("piece 1 of %s, before the corrupt one, was not recorded verified", u.what())
	}
}

// fileOf is the lease's open file at path.
func fileOf(l *store.Lease, path string) io.ReaderAt {
	for _, lf := range l.Files() {
		if lf.Path == path {
			return lf.File
		}
	}
	return nil
}
