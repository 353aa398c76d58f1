package store_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
)

// seedingProducer copies a source like Passthrough, announcing first, and
// records ranges verified only when the test says so.
type seedingProducer struct {
	src      *artifact.SourceDir
	written  chan struct{} // closed once every file is written
	verify   chan [2]int64 // ranges of the first file to record, until closed
	recorded chan error    // a receive per range recorded
	fail     error         // returned at the end, if set
	pieces   [][32]byte    // if set, recorded as the pieces of the first file's [0, 4096) once written
}

// big is the source's largest file.
func (p *seedingProducer) big() artifact.SourceFile {
	b := p.src.Files[0]
	for _, f := range p.src.Files {
		if f.Size > b.Size {
			b = f
		}
	}
	return b
}

func (p *seedingProducer) Name() string { return artifact.PassthroughName }

func (p *seedingProducer) Produce(ctx context.Context, w artifact.Writer) error {
	s := w
	if err := s.Verified(p.big().Path, 0, 1); err == nil {
		return errors.New("a range verified before the announce was taken")
	}
	if err := s.Announce([]byte(`{"doc":1}`)); err != nil {
		return err
	}
	if err := (&artifact.Passthrough{Src: p.src}).Produce(ctx, w); err != nil {
		return err
	}
	if p.pieces != nil {
		if err := s.Pieces(p.big().Path, 0, 4096, p.pieces); err != nil {
			return err
		}
		if s.Pieces(p.big().Path, p.big().Size, 1, p.pieces) == nil || s.Pieces(p.big().Path, 0, 4096, nil) == nil {
			return errors.New("pieces past the file's end, or none, were taken")
		}
	}
	close(p.written)
	for r := range p.verify {
		err := s.Verified(p.big().Path, r[0], r[1])
		p.recorded <- err
		if err != nil {
			return err
		}
	}
	return p.fail
}

func startSeeding(t *testing.T, fail error) (builder, reader *store.Domain, p *seedingProducer, id artifact.ID, done chan error) {
	t.Helper()
	return startSeedingPieces(t, fail, nil)
}

func startSeedingPieces(t *testing.T, fail error, pieces [][32]byte) (builder, reader *store.Domain, p *seedingProducer, id artifact.ID, done chan error) {
	t.Helper()
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	root := t.TempDir()
	builder, reader = storetest.OpenAt(t, root), storetest.OpenAt(t, root) // two domains on one root: separate locks, as two processes
	identity := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	id, _ = identity.ID()
	p = &seedingProducer{src: src, written: make(chan struct{}), verify: make(chan [2]int64), recorded: make(chan error), fail: fail, pieces: pieces}
	done = make(chan error, 1)
	go func() {
		l, _, err := builder.GetOrBuild(context.Background(), identity, p)
		if err == nil {
			l.Close()
		}
		done <- err
	}()
	<-p.written
	return builder, reader, p, id, done
}

func TestBuildingServesOnlyVerifiedRanges(t *testing.T) {
	_, reader, p, id, done := startSeeding(t, nil)
	ctx := context.Background()
	b, err := reader.Building(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if string(b.Document()) != `{"doc":1}` {
		t.Fatalf("document %q", b.Document())
	}
	if got := reader.Builds(ctx); len(got) != 1 || got[0] != id {
		t.Fatalf("builds %v, want [%s]", got, id.Short())
	}
	path, size := p.big().Path, p.big().Size
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = b.Wait(short, path, 0, 4096)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a range not verified yet: %v, want the wait to end at its deadline", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- b.Wait(ctx, path, 1024, 2048) }()
	select {
	case err := <-waited:
		t.Fatalf("the wait ended before the range was verified: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	for _, r := range [][2]int64{{0, 2048}, {2048, 2048}} { // adjacent: merged
		p.verify <- r
		if err := <-p.recorded; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if n := b.VerifiedBytes(); n != 4096 {
		t.Fatalf("verified bytes %d, want 4096", n)
	}
	f, err := b.File(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2048)
	if _, err := f.ReadAt(got, 1024); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(p.src.Root, path))
	if !bytes.Equal(got, want[1024:3072]) {
		t.Fatal("the verified range read back differs from the source")
	}
	if _, err := b.File("../x"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a path out of the build: %v", err)
	}
	close(p.verify)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Published: every range counts verified, through the same descriptors.
	if err := b.Wait(ctx, path, 4096, size-4096); err != nil {
		t.Fatalf("after publication: %v", err)
	}
	if _, err := reader.Building(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("a published artifact is still building: %v", err)
	}
	l, err := reader.Lookup(ctx, id, store.FullChecksum)
	if err != nil {
		t.Fatalf("the progress file changed what was published: %v", err)
	}
	l.Close()
}

// TestBuildingPieces: a range's recorded pieces are handed out before the
// range is verified; a range without them only once it is, as none.
func TestBuildingPieces(t *testing.T) {
	cvs := [][32]byte{{1}, {2}, {3}}
	_, reader, p, id, done := startSeedingPieces(t, nil, cvs)
	ctx := context.Background()
	b, err := reader.Building(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := p.big().Path
	got, err := b.WaitPieces(ctx, path, 0, 4096)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(cvs) {
		t.Fatalf("recorded pieces: %v, %v; want %v", got, err, cvs)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = b.WaitPieces(short, path, 4096, 4096)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no pieces, not verified: %v, want the wait to end at its deadline", err)
	}
	p.verify <- [2]int64{4096, 4096}
	if err := <-p.recorded; err != nil {
		t.Fatal(err)
	}
	if got, err := b.WaitPieces(ctx, path, 4096, 4096); err != nil || got != nil {
		t.Fatalf("verified without pieces: %v, %v; want none", got, err)
	}
	close(p.verify)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBuildingRefusesBadPieces: a pieces record whose count its body
// cannot hold is refused as data loss, before anything is allocated for it.
func TestBuildingRefusesBadPieces(t *testing.T) {
	_, reader, p, id, done := startSeeding(t, nil)
	defer func() { close(p.verify); <-done }()
	b, err := reader.Building(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	progress, _ := filepath.Glob(filepath.Join(reader.Root(), "tmp", id.Hex()+".*", ".progress"))
	if len(progress) != 1 {
		t.Fatalf("progress files %v", progress)
	}
	f, err := os.OpenFile(progress[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	body := binary.LittleEndian.AppendUint64(nil, 0)
	body = binary.LittleEndian.AppendUint64(body, 4096)
	body = binary.LittleEndian.AppendUint32(body, 0xffffffff)
	body = append(body, "x"...)
	rec := binary.LittleEndian.AppendUint32([]byte{'P'}, uint32(len(body)))
	if _, err := f.Write(append(rec, body...)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := b.WaitPieces(context.Background(), p.big().Path, 0, 4096); !errdefs.IsDataLoss(err) {
		t.Fatalf("a pieces record of 2^32-1 pieces in %d bytes: %v, want data loss", len(body), err)
	}
}

func TestBuildingEndedWithoutPublishing(t *testing.T) {
	_, reader, p, id, done := startSeeding(t, errors.New("producer failed"))
	ctx := context.Background()
	b, err := reader.Building(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waited := make(chan error, 1)
	go func() { waited <- b.Wait(ctx, p.big().Path, 0, 4096) }()
	close(p.verify)
	if err := <-done; err == nil {
		t.Fatal("the build did not fail")
	}
	var ended *store.BuildEndedError
	if err := <-waited; !errors.As(err, &ended) || !errdefs.IsUnavailable(err) {
		t.Fatalf("wait after a failed build: %v, want a BuildEndedError", err)
	}
}

func TestBuildingNeedsARunningAnnouncedBuild(t *testing.T) {
	d := storetest.Open(t)
	id, _ := artifact.ParseIDHex("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	if _, err := d.Building(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Fatalf("no build: %v, want not found", err)
	}
}

// TestSeedingFollowsTheServeLock: a build seeds only while a process (here
// another Domain on the root) serves the store.
func TestSeedingFollowsTheServeLock(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	identity := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	for _, serving := range []bool{false, true} {
		root := t.TempDir()
		d := storetest.OpenAt(t, root)
		if serving {
			release, err := storetest.OpenAt(t, root).Serving(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer release()
		}
		var seeding bool
		p := artifact.ProducerFunc{ProducerName: artifact.PassthroughName, Fn: func(ctx context.Context, w artifact.Writer) error {
			seeding = w.Seeding()
			return (&artifact.Passthrough{Src: src}).Produce(ctx, w)
		}}
		l, _, err := d.GetOrBuild(context.Background(), identity, p)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if seeding != serving {
			t.Fatalf("served %v: the build says seeding %v", serving, seeding)
		}
	}
}

// checkingProducer announces, records a source, and writes one safetensors
// file bound by its tree written in order: split bytes, then the rest
// once step is closed.
type checkingProducer struct {
	data  []byte
	want  artifact.FileEntry
	split int64
	step  chan struct{}
}

func (p *checkingProducer) Name() string { return artifact.PassthroughName }

func (p *checkingProducer) Produce(ctx context.Context, w artifact.Writer) error {
	s := w
	if err := s.Announce([]byte(`{"doc":2}`)); err != nil {
		return err
	}
	if err := s.Source(3); err != nil {
		return err
	}
	fw, err := w.CreateBound(artifact.Binding{Want: p.want, By: artifact.BindTreeStream})
	if err != nil {
		return err
	}
	if _, err := fw.Write(p.data[:p.split]); err != nil {
		return err
	}
	<-p.step
	if _, err := fw.Write(p.data[p.split:]); err != nil {
		fw.Close()
		return err
	}
	return fw.Close()
}

// A build that checks tensors as they are written serves each one once it
// is written and checked, before the file's sha256, and records its depth;
// a tensor that differs from the record fails the build.
func TestBuildingServesTensorsAsTheyCheck(t *testing.T) {
	var buf bytes.Buffer
	if _, err := artifact.WriteSafetensors(&buf, []artifact.WriteTensor{
		{Name: "a", DType: "U8", Shape: []int64{1 << 16}, Data: bytes.Repeat([]byte{1}, 1<<16)},
		{Name: "b", DType: "U8", Shape: []int64{1 << 16}, Data: bytes.Repeat([]byte{2}, 1<<16)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	h, _ := artifact.NewFileHasher(artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: "m.safetensors", Size: int64(len(data))}}})
	h.Write(data)
	want, err := h.Sum()
	if err != nil {
		t.Fatal(err)
	}
	a := want.Tensors[0]
	for _, corrupt := range []bool{false, true} {
		t.Run(map[bool]string{false: "good", true: "second tensor wrong"}[corrupt], func(t *testing.T) {
			root := t.TempDir()
			builder, reader := storetest.OpenAt(t, root), storetest.OpenAt(t, root)
			bytesIn := bytes.Clone(data)
			if corrupt {
				bytesIn[len(bytesIn)-1] ^= 0xff
			}
			p := &checkingProducer{data: bytesIn, want: want, split: a.Offset + a.Length + 10, step: make(chan struct{})}
			identity := artifact.Identity{Schema: artifact.IdentitySchema,
				Model:          artifact.Model{Revision: storetest.Revision, Source: []artifact.SourceFile{{Path: want.Path, Size: want.Size, SHA256: want.SHA256}}},
				Component:      "all",
				Representation: artifact.Representation{DType: "source"},
				Layout:         artifact.Layout{Name: "source"},
				Producer:       artifact.ProducerRef{Name: "test", Version: "1", Fingerprint: "test", ManifestSchema: 1, RestorerSchema: 1}}
			id, _ := identity.ID()
			done := make(chan error, 1)
			go func() {
				l, _, err := builder.GetOrBuild(context.Background(), identity, p)
				if err == nil {
					l.Close()
				}
				done <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var b *store.Building
			if err := testenv.Wait(10*time.Second, func() (err error) {
				b, err = reader.Building(ctx, id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Wait(ctx, want.Path, 0, a.Offset+a.Length); err != nil {
				t.Fatalf("the header and first tensor, written and checked: %v", err)
			}
			if d := b.Depth(); d != 3 {
				t.Fatalf("depth %d, want 3", d)
			}
			short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
			err := b.Wait(short, want.Path, a.Offset+a.Length, 1)
			cancelShort()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a tensor written in part: %v, want it not served", err)
			}
			close(p.step)
			err = <-done
			var mm *artifact.EntryMismatchError
			switch {
			case !corrupt && err != nil:
				t.Fatal(err)
			case corrupt && (!errors.As(err, &mm) || mm.Tensor != "b"):
				t.Fatalf("build: %v, want the mismatch of tensor b", err)
			}
		})
	}
}

// blockingProducer holds its build (and its build lock) until release.
type blockingProducer struct{ started, release chan struct{} }

func (p *blockingProducer) Name() string { return artifact.PassthroughName }

func (p *blockingProducer) Produce(ctx context.Context, w artifact.Writer) error {
	close(p.started)
	<-p.release
	return errors.New("released")
}

// A build interrupted (kept for the next build to reuse) ends its
// followers at once, even while the next build of the identity runs.
func TestBuildingEndsWhenInterruptedAndRebuilt(t *testing.T) {
	builder, reader, p, id, done := startSeeding(t, fmt.Errorf("source went away: %w", errdefs.ErrUnavailable))
	ctx := context.Background()
	b, err := reader.Building(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	close(p.verify)
	if err := <-done; !errdefs.IsUnavailable(err) {
		t.Fatalf("the build: %v, want it interrupted", err)
	}
	next := &blockingProducer{started: make(chan struct{}), release: make(chan struct{})}
	second := make(chan error, 1)
	go func() {
		_, _, err := builder.GetOrBuild(ctx, artifact.PassthroughIdentity(p.src, "", storetest.Revision, "", 0, 0), next)
		second <- err
	}()
	<-next.started
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ended *store.BuildEndedError
	if err := b.Wait(wctx, p.big().Path, 0, 4096); !errors.As(err, &ended) {
		t.Fatalf("following an interrupted build while the next one runs: %v, want a BuildEndedError", err)
	}
	close(next.release)
	<-second
}
