package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// pieceProducer copies a READY artifact of another store like a builder
// that records every tensor's pieces once the files are written, then
// records ranges verified a piece at a time: of the safetensors file only
// those that end by stop, the rest at release. A wrongCV one records the
// long tensor's pieces with a byte flipped; a wrongPiece one writes a byte
// of the long tensor's piece 1 flipped; either fails after release.
type pieceProducer struct {
	src                 *store.Lease
	long                artifact.TensorEntry // the first tensor longer than a piece
	stop                int64
	wrongCV, wrongPiece bool
	written, release    chan struct{}
}

func (p *pieceProducer) Name() string { return artifact.PassthroughName }

func (p *pieceProducer) Produce(ctx context.Context, w artifact.Writer) error {
	sv, err := servableFromLease(p.src)
	if err != nil {
		return err
	}
	sd := w
	if err := announce(sd, &sv.manifest); err != nil {
		return err
	}
	if err := sd.Source(0); err != nil {
		return err
	}
	for _, f := range p.src.Files() {
		fw, err := w.Create(f.Path, f.Entry.Size)
		if err != nil {
			return err
		}
		data, err := f.Data()
		if err != nil {
			return err
		}
		if p.wrongPiece && len(f.Entry.Tensors) > 0 {
			data = bytes.Clone(data)
			data[p.long.Offset+blake3.PieceSize+5] ^= 0xff
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
		if err := fw.Close(); err != nil {
			return err
		}
	}
	for _, f := range p.src.Files() {
		data, err := f.Data()
		if err != nil {
			return err
		}
		for _, x := range f.Entry.Tensors {
			if x.Length > blake3.PieceSize {
				cvs, err := hashPieces(bytes.NewReader(data), x.Offset, x.Length)
				if err != nil {
					return err
				}
				if p.wrongCV {
					cvs[0][0] ^= 1
				}
				if err := sd.Pieces(f.Path, x.Offset, x.Length, cvs); err != nil {
					return err
				}
			}
		}
	}
	// Every file but the safetensors one at once; that one up to stop,
	// and the rest at release.
	verify := func(early bool) error {
		for _, f := range p.src.Files() {
			off, end := int64(0), f.Entry.Size
			if len(f.Entry.Tensors) > 0 {
				if end = min(end, p.stop); !early {
					off, end = end, f.Entry.Size
				}
			} else if !early {
				continue
			}
			if err := sd.Verified(f.Path, off, end-off); err != nil {
				return err
			}
		}
		return nil
	}
	if err := verify(true); err != nil {
		return err
	}
	close(p.written)
	<-p.release
	if p.wrongCV || p.wrongPiece {
		return fmt.Errorf("the builder failed")
	}
	return verify(false)
}

// seededPieces is a store holding an artifact of one safetensors file
// whose largest tensors are two pieces long, and its identity.
func seededPieces(t *testing.T) (*store.Domain, artifact.Identity) {
	_, src := storetest.CheckpointOf(t, synth.Options{Size: 16 << 20, Shards: 1, DType: "F32", Seed: 7})
	d := storetest.Open(t)
	return d, storetest.Seed(t, d, src)
}

// buildPieces starts p's build, on a new store served with cfg, of the
// artifact identity that a holds; stop is counted from the long tensor's
// first piece.
func buildPieces(t *testing.T, a *store.Domain, identity artifact.Identity, p *pieceProducer, stop int64, cfg ServerConfig) (string, chan error) {
	t.Helper()
	src := heldLease(t, a, identity)
	for _, f := range src.Files() {
		for _, x := range f.Entry.Tensors {
			if x.Length > blake3.PieceSize && p.long.Name == "" {
				p.long = x
			}
		}
	}
	if p.long.Name == "" {
		t.Fatal("no tensor longer than a piece")
	}
	p.src, p.stop, p.written, p.release = src, p.long.Offset+stop, make(chan struct{}), make(chan struct{})
	b := storetest.Open(t)
	_, addr := serve(t, b, cfg)
	built := make(chan error, 1)
	go func() {
		l, _, err := b.GetOrBuild(context.Background(), identity, p)
		if err == nil {
			l.Close()
		}
		built <- err
	}()
	<-p.written
	return addr, built
}

// TestPiecesForwardBeforeTheTensorIsWhole: a chain A (a builder that
// recorded its pieces and verified a tensor's first piece only) → B (a
// seeding fetch, in pieces, recording them) → C: C gets that piece, and
// not a byte more, before B or A has the whole tensor.
func TestPiecesForwardBeforeTheTensorIsWhole(t *testing.T) {
	a, identity := seededPieces(t)
	p := &pieceProducer{}
	addrA, builtA := buildPieces(t, a, identity, p, blake3.PieceSize, ServerConfig{})
	id, _ := identity.ID()
	ctx := context.Background()
	b := storetest.Open(t)
	_, addrB := serve(t, b, ServerConfig{})
	fetchedB := make(chan error, 1)
	go func() {
		l, _, err := Fetch(ctx, b, []string{addrA}, id.String(), FetchOptions{})
		if err == nil {
			verifyFull(t, b, l.ID)
			l.Close()
		}
		fetchedB <- err
	}()
	// C may take B once B has a source.
	testenv.Eventually(t, 20*time.Second, func() bool {
		ls, _ := (ClientConfig{}).List(ctx, addrB)
		return ls != nil && len(ls.Artifacts) == 1 && ls.Artifacts[0].Depth > 0
	}, "B never listed a source")
	c := storetest.Open(t)
	var moved atomic.Int64
	fetchedC := make(chan error, 1)
	go func() {
		l, _, err := Fetch(ctx, c, []string{addrB}, id.String(), FetchOptions{Progress: func(n int64) { moved.Add(n) }})
		if err == nil {
			verifyFull(t, c, l.ID)
			l.Close()
		}
		fetchedC <- err
	}()
	want := p.stop // and the files before the safetensors one: on one rail, in order
	for _, f := range p.src.Files() {
		if len(f.Entry.Tensors) > 0 {
			break
		}
		want += f.Entry.Size
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return moved.Load() >= want }, "C never verified the %d bytes A verified", want)
	// A holds B's request for the rest of the tensor and B holds C's: any
	// byte more would have been sent instead.
	testenv.Eventually(t, 20*time.Second, func() bool { return buildWaiters() >= 2 }, "A and B do not both wait for A's build to verify more")
	if n := moved.Load(); n != want {
		t.Fatalf("C verified %d bytes, want %d: the files before, and the safetensors file up to %s's first piece's end", n, want, p.long.Name)
	}
	bb, err := b.Building(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	cvs, err := bb.WaitPieces(short, "model.safetensors", p.long.Offset, p.long.Length)
	cancel()
	bb.Close()
	if d, _ := artifact.ParseSum(p.long.BLAKE3); err != nil || blake3.RootFromCVs(cvs) != d {
		t.Fatalf("B's record of %s's pieces: %d, %v", p.long.Name, len(cvs), err)
	}
	close(p.release)
	for _, ch := range []chan error{builtA, fetchedB, fetchedC} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// TestPiecesRefuseWrongOnes: a builder whose pieces' list does not merge
// into a tensor's BLAKE3, or whose piece does not match its chaining value,
// is refused and named.
func TestPiecesRefuseWrongOnes(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *pieceProducer
		want string
	}{
		{"wrong list", &pieceProducer{wrongCV: true}, "not merging into its BLAKE3"},
		{"wrong piece", &pieceProducer{wrongPiece: true}, "piece 1: chaining value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, identity := seededPieces(t)
			// Room for a new session while the last one ends: the fetch's
			// last error is the refusal.
			addr, built := buildPieces(t, a, identity, tc.p, 1<<40, ServerConfig{MaxChildren: 4})
			defer func() { close(tc.p.release); <-built }()
			_, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, identity), FetchOptions{Patience: 300 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), tc.p.long.Name) {
				t.Fatalf("fetch from a builder with a %s: %v; want %q, its address and the tensor", tc.name, err, tc.want)
			}
		})
	}
}

// TestPiecesResumeFromAnotherPeer: a fetch whose source served a wrong
// piece resumes from a holder with the pieces still missing.
func TestPiecesResumeFromAnotherPeer(t *testing.T) {
	a, identity := seededPieces(t)
	p := &pieceProducer{wrongPiece: true}
	addrB, built := buildPieces(t, a, identity, p, 1<<40, ServerConfig{})
	defer func() { close(p.release); <-built }()
	fetchPastRefusedBuilder(t, a, identity, addrB)
}

// TestPiecesOfASubset: a tensor subset from a builder takes its long
// tensors in pieces into its scratch file.
func TestPiecesOfASubset(t *testing.T) {
	a, identity := seededPieces(t)
	p := &pieceProducer{}
	addr, built := buildPieces(t, a, identity, p, 1<<40, ServerConfig{})
	defer func() { close(p.release); <-built }()
	largest, progress := largestUnit()
	c := storetest.Open(t)
	l, _, err := Fetch(context.Background(), c, []string{addr}, digestOf(t, identity), FetchOptions{Tensors: []string{p.long.Name}, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	verifyFull(t, c, l.ID)
	got, _, err := l.Tensor(p.long.Name)
	if err != nil || largest.Load() > blake3.PieceSize {
		t.Fatalf("subset of %s: largest unit %d bytes, %v", p.long.Name, largest.Load(), err)
	}
	if d, _ := artifact.ParseSum(p.long.BLAKE3); blake3.Sum256(got) != d {
		t.Fatalf("tensor %s differs from the source", p.long.Name)
	}
}

// TestPiecesFromAHolder: a seeding fetch from a node holding the artifact
// READY takes its long tensors in pieces, which the holder hashes from its
// files; a fetch that does not seed takes them whole.
func TestPiecesFromAHolder(t *testing.T) {
	a, identity := seededPieces(t)
	_, addrA := serve(t, a, ServerConfig{})
	for _, seeding := range []bool{true, false} {
		b := storetest.Open(t)
		if seeding {
			serve(t, b, ServerConfig{})
		}
		largest, progress := largestUnit()
		l, _, err := Fetch(context.Background(), b, []string{addrA}, digestOf(t, identity), FetchOptions{Progress: progress})
		if err != nil {
			t.Fatal(err)
		}
		verifyFull(t, b, l.ID)
		l.Close()
		if inPieces := largest.Load() <= blake3.PieceSize; inPieces != seeding {
			t.Fatalf("seeding %t: the largest unit verified was %d bytes", seeding, largest.Load())
		}
	}
}

// largestUnit is a progress function that keeps the largest step.
func largestUnit() (*atomic.Int64, func(int64)) {
	var largest atomic.Int64
	return &largest, func(n int64) {
		for m := largest.Load(); n > m && !largest.CompareAndSwap(m, n); m = largest.Load() {
		}
	}
}

// TestPiecesFromAnOldPeer: a seeding fetch from a peer whose manifest has
// no piece_size (here a proxy of its control connection drops it) takes
// whole units.
func TestPiecesFromAnOldPeer(t *testing.T) {
	a, identity := seededPieces(t)
	_, addrA := serve(t, a, ServerConfig{})
	old := oldPeer(t, addrA)
	b := storetest.Open(t)
	serve(t, b, ServerConfig{})
	largest, progress := largestUnit()
	l, rep, err := Fetch(context.Background(), b, []string{old}, digestOf(t, identity), FetchOptions{Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	verifyFull(t, b, l.ID)
	if rep.Endpoint != old || largest.Load() <= blake3.PieceSize {
		t.Fatalf("report %+v, largest unit %d bytes: want the old peer, whole tensors", rep, largest.Load())
	}
}

// oldPeer proxies control connections to addr, dropping the manifest's
// piece_size; rails go to addr itself.
func oldPeer(t *testing.T, addr string) string {
	return acceptEach(t, func(c net.Conn) {
		s, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer s.Close()
		go io.Copy(s, c)
		r := bufio.NewReader(s)
		if wire.ReadStatus(r, "model request") != nil {
			return
		}
		m, err := wire.ReadManifest(r, wire.DefaultManifestMax)
		if err != nil {
			return
		}
		m.PieceSize = 0
		doc, _ := json.Marshal(m)
		c.Write(wire.Enc{wire.StatusOK}.Blob32(doc))
		io.Copy(c, r)
	})
}

func TestPiecesFrom(t *testing.T) {
	for _, tc := range []struct {
		pieceSize int64
		seeding   bool
		building  bool
		want      bool
	}{
		{blake3.PieceSize, true, false, true},
		{blake3.PieceSize, false, true, true},
		{blake3.PieceSize, false, false, false},
		{0, true, true, false},
		{2 * blake3.PieceSize, true, true, false},
	} {
		f := &fetcher{}
		if tc.seeding {
			f.seed = seederStub{}
		}
		cs := &clientSession{manifest: &wire.WeightManifest{PieceSize: tc.pieceSize, Building: tc.building}}
		if got := f.piecesFrom(cs); got != tc.want {
			t.Errorf("%+v: pieces %t", tc, got)
		}
	}
}

// seederStub is a Seeder for piecesFrom, which only asks whether there is one.
type seederStub struct{ artifact.Seeder }
