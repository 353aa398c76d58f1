package oci

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"golang.org/x/sync/errgroup"
)

// The pieces layer (MediaTypePieces) holds the BLAKE3 chaining values of
// the pieces (artifact/blake3) of every unit of an artifact longer than a
// piece. A unit is a range of a payload file that one BLAKE3 of the index
// covers: a safetensors file's header region or one of its tensors, or a
// whole other file. The layer is those units' chaining values, 32 bytes a
// piece, in the index's order (files by path, a file's units by offset),
// and nothing else: the index alone gives its exact size. A pull that
// serves what it pulls checks that each unit's values merge into the
// unit's BLAKE3 before its first byte, then verifies each piece as it
// lands, so peers get it before the unit is whole.

// pieceUnit is one unit of an artifact longer than a piece.
type pieceUnit struct {
	path   string
	tensor string // the tensor's name; "" for a header region or a whole file
	header bool   // the header region of a safetensors file
	off, n int64
	blake3 string // the index's BLAKE3 of the unit, hex
}

// what names the unit in errors: its file, and its tensor or header region.
func (u pieceUnit) what() string {
	switch {
	case u.tensor != "":
		return "tensor " + u.tensor + " of " + u.path
	case u.header:
		return "header region of " + u.path
	}
	return u.path
}

// mismatch is the typed failure of a unit whose bytes or chaining values
// disagree with the index: field names what disagreed.
func (u pieceUnit) mismatch(field, want, got string) error {
	if u.header {
		field = "header_blake3 " + field
	}
	return &artifact.EntryMismatchError{Path: u.path, Tensor: u.tensor, Field: field, Want: want, Got: got}
}

// pieceUnits are the units of x's files longer than a piece, in the
// pieces layer's order.
func pieceUnits(files []artifact.FileEntry) []pieceUnit {
	var us []pieceUnit
	add := func(u pieceUnit) {
		if u.n > blake3.PieceSize {
			us = append(us, u)
		}
	}
	for _, f := range files {
		if f.DataStart == 0 {
			add(pieceUnit{path: f.Path, n: f.Size, blake3: f.BLAKE3})
			continue
		}
		add(pieceUnit{path: f.Path, header: true, n: f.DataStart, blake3: f.HeaderBLAKE3})
		for _, t := range f.Tensors {
			add(pieceUnit{path: f.Path, tensor: t.Name, off: t.Offset, n: t.Length, blake3: t.BLAKE3})
		}
	}
	return us
}

// piecesSize is the size of the pieces layer of units us.
func piecesSize(us []pieceUnit) int64 {
	var n int64
	for _, u := range us {
		n += 32 * blake3.Pieces(u.n)
	}
	return n
}

// hashPieces computes the pieces layer of an artifact's files, read
// through open (a file's bytes by its path), several units at once. It is
// nil when no unit is longer than a piece.
func hashPieces(ctx context.Context, files []artifact.FileEntry, open func(path string) io.ReaderAt) ([]byte, error) {
	us := pieceUnits(files)
	if len(us) == 0 {
		return nil, nil
	}
	out := make([]byte, piecesSize(us))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	var at int64
	for _, u := range us {
		dst := out[at : at+32*blake3.Pieces(u.n)]
		at += int64(len(dst))
		g.Go(func() error {
			r := open(u.path)
			for i := range blake3.Pieces(u.n) {
				if err := gctx.Err(); err != nil {
					return err
				}
				off := i * blake3.PieceSize
				h := blake3.NewPieceHasher(i)
				if _, err := io.Copy(h, io.NewSectionReader(r, u.off+off, min(blake3.PieceSize, u.n-off))); err != nil {
					return fmt.Errorf("pieces of %s: %w", u.what(), err)
				}
				h.Sum(dst[32*i : 32*i])
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// unitPieces are a unit's pieces' chaining values, checked against its BLAKE3.
type unitPieces struct {
	pieceUnit
	cvs [][32]byte
}

// readPieces reads the pieces layer of units us from r, exactly its size
// and no byte more, and checks that each unit's chaining values merge into
// the unit's BLAKE3: a unit whose values do not is a
// *artifact.EntryMismatchError naming it.
func readPieces(r io.Reader, us []pieceUnit) ([]unitPieces, error) {
	out := make([]unitPieces, 0, len(us))
	for _, u := range us {
		cvs := make([][32]byte, blake3.Pieces(u.n))
		for i := range cvs {
			if _, err := io.ReadFull(r, cvs[i][:]); err != nil {
				return nil, fmt.Errorf("pieces layer: %s: %w: %w", u.what(), err, errdefs.ErrDataLoss)
			}
		}
		if got := blake3.RootFromCVs(cvs); hex.EncodeToString(got[:]) != u.blake3 {
			return nil, u.mismatch("pieces", u.blake3, hex.EncodeToString(got[:]))
		}
		out = append(out, unitPieces{u, cvs})
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return nil, fmt.Errorf("pieces layer: bytes past its last unit: %w", errdefs.ErrDataLoss)
	}
	return out, nil
}

// PiecesLayer returns the pieces layer of a manifest, if it has one.
func PiecesLayer(m *ocispec.Manifest) (ocispec.Descriptor, bool) {
	for _, l := range m.Layers {
		if l.MediaType == MediaTypePieces {
			return l, true
		}
	}
	return ocispec.Descriptor{}, false
}

// metaLayer says whether a layer of a weightsnap artifact holds no payload
// file: the index layer or the pieces layer.
func metaLayer(l ocispec.Descriptor) bool {
	return l.MediaType == MediaTypeIndex || l.MediaType == MediaTypePieces
}
