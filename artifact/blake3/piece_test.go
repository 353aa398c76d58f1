package blake3

import (
	"bytes"
	"math/rand/v2"
	"testing"

	reference "github.com/zeebo/blake3"
)

// pieceCVs hashes each piece of b, in writes of random sizes.
func pieceCVs(b []byte, r *rand.Rand) [][32]byte {
	var cvs [][32]byte
	for i := int64(0); i < Pieces(int64(len(b))); i++ {
		p := b[i*PieceSize : min((i+1)*PieceSize, int64(len(b)))]
		h := NewPieceHasher(i)
		for len(p) > 0 {
			k := min(len(p), 1+r.IntN(3*batch))
			h.Write(p[:k])
			p = p[k:]
		}
		cvs = append(cvs, [32]byte(h.Sum(nil)))
	}
	return cvs
}

// TestRootFromCVs: the pieces' chaining values of inputs of many lengths,
// around the chunk, batch and piece boundaries and at random, merge into
// the reference digest of the whole; an input of one piece is its plain hash.
func TestRootFromCVs(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 9*PieceSize+5000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	lengths := []int{0, 1, 1023, 1024, 1025, batch, PieceSize - 1, PieceSize, PieceSize + 1, PieceSize + 1024,
		2 * PieceSize, 2*PieceSize + 1, 3*PieceSize + 17, 4 * PieceSize, 5*PieceSize - 1, 8 * PieceSize, 8*PieceSize + 1, len(data)}
	for range 12 {
		lengths = append(lengths, r.IntN(len(data)+1))
	}
	for _, n := range lengths {
		want := reference.Sum256(data[:n])
		cvs := pieceCVs(data[:n], r)
		if int64(len(cvs)) != Pieces(int64(n)) {
			t.Fatalf("%d bytes: %d pieces, want %d", n, len(cvs), Pieces(int64(n)))
		}
		if n <= PieceSize {
			if got := RootFromCVs(cvs); got != ([32]byte{}) {
				t.Fatalf("%d bytes, one piece: RootFromCVs %x, want the zero array", n, got)
			}
			continue
		}
		if got := RootFromCVs(cvs); got != want {
			t.Fatalf("%d bytes, %d pieces: root %x, want %x", n, len(cvs), got, want)
		}
	}
}

// TestPieceFlip: a byte flipped in one piece changes that piece's chaining
// value only, and so the root.
func TestPieceFlip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 3*PieceSize+17)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	cvs := pieceCVs(data, r)
	for _, at := range []int{0, PieceSize - 1, PieceSize, 2*PieceSize + 100, len(data) - 1} {
		bad := bytes.Clone(data)
		bad[at] ^= 1
		got := pieceCVs(bad, r)
		for i := range got {
			if changed := got[i] != cvs[i]; changed != (i == at/PieceSize) {
				t.Fatalf("byte %d flipped: piece %d changed %t", at, i, changed)
			}
		}
		if RootFromCVs(got) == RootFromCVs(cvs) {
			t.Fatalf("byte %d flipped: same root", at)
		}
	}
}

// TestPieceHasherReset: Sum does not disturb the state; Reset starts the
// same piece again.
func TestPieceHasherReset(t *testing.T) {
	data := vectorInput(PieceSize)
	h := NewPieceHasher(2)
	h.Write(data[:5000])
	h.Sum(nil)
	h.Write(data[5000:])
	want := h.Sum(nil)
	h.Reset()
	h.Write(data)
	if got := h.Sum([]byte("prefix")); string(got[:6]) != "prefix" || !bytes.Equal(got[6:], want) {
		t.Fatalf("after Reset: %x, want prefix and %x", got, want)
	}
	if other := NewPieceHasher(3); bytes.Equal(func() []byte { other.Write(data); return other.Sum(nil) }(), want) {
		t.Fatal("the same bytes as another piece: same chaining value")
	}
}
