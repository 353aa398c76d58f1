package blake3

import (
	"encoding/binary"
	"math/bits"

	"lukechampine.com/blake3/guts"
)

// Pieces: an input longer than PieceSize is verified PieceSize bytes at a
// time. Piece i, [i·PieceSize, min((i+1)·PieceSize, n)), is a node of
// BLAKE3's tree of the whole input: the tree is left-balanced (every left
// subtree is the largest power of two of chunks strictly less than its
// parent's), so each left subtree of more than a piece is whole pieces,
// and the last piece, however short, is a right edge merged on its own.
// The chaining values of its pieces, merged left-balanced with the root
// flag on the last merge (RootFromCVs), are the input's BLAKE3.
const (
	// PieceChunks is the chunks of a piece: a power of two, a multiple of
	// guts.MaxSIMD.
	PieceChunks = 1024
	// PieceSize is the bytes of a piece.
	PieceSize = PieceChunks * guts.ChunkSize
)

// Pieces is how many pieces an input of n bytes has: at least one.
func Pieces(n int64) int64 {
	return max(1, (n+PieceSize-1)/PieceSize)
}

// PieceHasher computes the chaining value of one piece; it implements
// hash.Hash, its Sum appending the chaining value (not a digest).
type PieceHasher struct {
	h wideHasher
}

// NewPieceHasher returns a hasher of piece i of an input: its first chunk
// is i·PieceChunks.
func NewPieceHasher(i int64) *PieceHasher {
	p := &PieceHasher{}
	p.h.tree.base = uint64(i) * PieceChunks
	return p
}

// Write implements io.Writer; it never fails. A piece is at most PieceSize bytes.
func (p *PieceHasher) Write(b []byte) (int, error) {
	p.h.write(b)
	return len(b), nil
}

// Sum appends the piece's chaining value to b; the hasher can go on.
func (p *PieceHasher) Sum(b []byte) []byte {
	cv := cvBytes(guts.ChainingValue(p.h.top()))
	return append(b, cv[:]...)
}

// Reset forgets every byte written; the piece stays.
func (p *PieceHasher) Reset() { p.h.reset() }

// Size is the chaining value's length in bytes.
func (p *PieceHasher) Size() int { return 32 }

// BlockSize is BLAKE3's block size.
func (p *PieceHasher) BlockSize() int { return guts.BlockSize }

// RootFromCVs is the BLAKE3 digest of an input from the chaining values of
// its pieces, in order. An input of one piece has no parent node: its
// digest is the plain hash of its bytes, and RootFromCVs of fewer than two
// is the zero array, which is no input's digest.
func RootFromCVs(cvs [][32]byte) (sum [32]byte) {
	if len(cvs) < 2 {
		return sum
	}
	node := parentOf(cvs)
	node.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(node))
	copy(sum[:], out[:32])
	return sum
}

// parentOf is the parent node of two or more pieces: its left subtree the
// largest power of two of them strictly less than their count.
func parentOf(cvs [][32]byte) guts.Node {
	k := 1 << (bits.Len(uint(len(cvs)-1)) - 1)
	return guts.ParentNode(subtreeCV(cvs[:k]), subtreeCV(cvs[k:]), &guts.IV, 0)
}

// subtreeCV is the chaining value of one or more pieces.
func subtreeCV(cvs [][32]byte) [8]uint32 {
	if len(cvs) == 1 {
		var w [8]uint32
		for i := range w {
			w[i] = binary.LittleEndian.Uint32(cvs[0][4*i:])
		}
		return w
	}
	return guts.ChainingValue(parentOf(cvs))
}

func cvBytes(w [8]uint32) (b [32]byte) {
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}
