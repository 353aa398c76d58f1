package oci

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"slices"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// filePiece is one piece of a unit of a payload file: its range in the
// file, its index in the unit, and its chaining value, which the unit's
// BLAKE3 bound (readPieces).
type filePiece struct {
	unit   *unitPieces
	i      int64
	off, n int64
}

// cv is the piece's chaining value.
func (fp filePiece) cv() [32]byte { return fp.unit.cvs[fp.i] }

// loadPieces reads the plan's pieces layer, when the pull serves what it
// pulls and the artifact has one: every unit's chaining values are checked
// against its BLAKE3 before any payload byte, and each file's pieces are
// kept, in file order, for its copy (copyPieces).
func (p *puller) loadPieces(ctx context.Context) error {
	if p.plan.Pieces == nil {
		return nil
	}
	us := pieceUnits(p.plan.Index.Files)
	raw, err := p.r.FetchSmall(ctx, *p.plan.Pieces, "pieces layer of "+p.r.String(), piecesSize(us))
	if err != nil {
		return err
	}
	ups, err := readPieces(bytes.NewReader(raw), us)
	if err != nil {
		return fmt.Errorf("%s: %w", p.r, err)
	}
	p.pieces = map[string][]filePiece{}
	p.units = map[string][]*unitPieces{}
	for k := range ups {
		u := &ups[k]
		p.units[u.path] = append(p.units[u.path], u)
		for i := range int64(len(u.cvs)) {
			at := i * blake3.PieceSize
			p.pieces[u.path] = append(p.pieces[u.path], filePiece{unit: u, i: i, off: u.off + at, n: min(blake3.PieceSize, u.n-at)})
		}
	}
	return nil
}

// recordPieces records a file's units' chaining values in the build
// (artifact.Seeder.Pieces) once the file exists there, before any of its
// pieces is recorded verified.
func (p *puller) recordPieces(t *fileTask) error {
	if t.piecesRecorded {
		return nil
	}
	for _, u := range p.units[t.f.Path] {
		if err := p.seed.Pieces(u.path, u.off, u.n, u.cvs); err != nil {
			return err
		}
	}
	t.piecesRecorded = true
	return nil
}

// copyPieces copies the next n bytes of a blob stream into the file from
// pos, as artifact.CopyTo does, but takes each whole piece of the file's
// units on its own: read, checked against its chaining value, written,
// and once written recorded verified, so peers get it before its unit is
// whole. A piece that fails its check is a *artifact.EntryMismatchError
// naming its unit and piece, before a byte of it is written. Bytes outside
// whole pieces (short units, or a piece the stream broke in or began
// inside) are copied as they are; the store's writer checks them with
// their unit. It returns the bytes written: a piece the stream broke in
// is not.
func (p *puller) copyPieces(ctx context.Context, t *fileTask, r io.Reader, pos, n int64) (int64, error) {
	if err := p.recordPieces(t); err != nil {
		return 0, err
	}
	ps := p.pieces[t.f.Path]
	w := newPieceWriter(ctx, p, t)
	end := pos + n
	start := pos
	for pos < end {
		k, _ := slices.BinarySearchFunc(ps, pos, func(fp filePiece, off int64) int { return cmp.Compare(fp.off, off) })
		if k < len(ps) && ps[k].off == pos && ps[k].n <= end-pos {
			if err := w.write(ctx, r, ps[k]); err != nil {
				return pos - start, w.wait(err)
			}
			pos += ps[k].n
			continue
		}
		next := end
		if k < len(ps) {
			next = min(end, ps[k].off)
		}
		c, err := artifact.CopyTo(ctx, t.fw, r, next-pos, p.progressFetched)
		pos += c
		if err != nil {
			return pos - start, w.wait(err)
		}
	}
	return pos - start, w.wait(nil)
}

// pieceWriter writes a file's pieces through its writer's lent buffers
// (artifact.FileWriter.WriteBuffer); its recorder records each verified,
// in order, as soon as the writer is through with it and has not failed.
type pieceWriter struct {
	p        *puller
	t        *fileTask
	pending  chan pendingPiece
	recorded chan error // the recorder's first failure, once pending is closed
}

// pendingPiece is a piece handed to the writer, whose done closes.
type pendingPiece struct {
	fp   filePiece
	done chan struct{}
}

func newPieceWriter(ctx context.Context, p *puller, t *fileTask) *pieceWriter {
	w := &pieceWriter{p: p, t: t, pending: make(chan pendingPiece, ringPieces), recorded: make(chan error, 1)}
	go w.record(ctx)
	return w
}

// ringPieces is how many pieces may wait for the writer before a copy waits.
const ringPieces = 8

// write reads one piece from r, checks it and hands it to the writer.
func (w *pieceWriter) write(ctx context.Context, r io.Reader, fp filePiece) error {
	bp := w.p.pieceBuffer()
	buf := (*bp)[:fp.n]
	if err := ctx.Err(); err != nil {
		w.p.pieceBufs.Put(bp)
		return err
	}
	k, err := io.ReadFull(r, buf)
	w.p.progressFetched(int64(k))
	if err != nil {
		w.p.pieceBufs.Put(bp)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &artifact.SourceError{Err: err}
	}
	h := blake3.NewPieceHasher(fp.i)
	h.Write(buf)
	if got, want := h.Sum(nil), fp.cv(); !bytes.Equal(got, want[:]) {
		w.p.pieceBufs.Put(bp)
		return fp.unit.mismatch(fmt.Sprintf("chaining value of piece %d", fp.i), hex.EncodeToString(want[:]), hex.EncodeToString(got))
	}
	done := make(chan struct{})
	if err := w.t.fw.WriteBuffer(buf, func() { w.p.pieceBufs.Put(bp); close(done) }); err != nil {
		return err
	}
	w.pending <- pendingPiece{fp, done}
	return nil
}

// record records verified each piece handed to the writer, in order, once
// the writer is through with it. The store's writer fails before it lets a
// buffer go whose write failed, and an empty write reports that failure:
// one that succeeds after a piece's done says the piece is on disk.
// Peers may read a piece from the moment it is recorded.
func (w *pieceWriter) record(ctx context.Context) {
	var err error
	for pp := range w.pending {
		<-pp.done
		if err != nil {
			continue
		}
		if _, err = w.t.fw.Write(nil); err == nil {
			err = w.p.seed.Verified(w.t.f.Path, pp.fp.off, pp.fp.n)
		}
		if err == nil {
			log.G(ctx).WithField("file", w.t.f.Path).WithField("offset", pp.fp.off).Debug("pull: piece verified; peers may read it")
		}
	}
	w.recorded <- err
}

// wait waits for the recorder to record every piece handed to the writer,
// after a copy that ended with err; err comes first.
func (w *pieceWriter) wait(err error) error {
	close(w.pending)
	if rerr := <-w.recorded; err == nil {
		err = rerr
	}
	return err
}

// pieceBuffer is a buffer of a piece's size, from the puller's pool.
func (p *puller) pieceBuffer() *[]byte {
	if b, ok := p.pieceBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, blake3.PieceSize)
	return &b
}

// progressFetched counts payload bytes fetched.
func (p *puller) progressFetched(k int64) {
	p.fetched.Add(k)
	p.progress(k)
}
