package blake3

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"testing"

	reference "github.com/zeebo/blake3"
	"lukechampine.com/blake3/guts"
)

// newWide is the guts tree whatever this CPU has (guts itself falls back
// to AVX2 or plain Go), so the tests check it on every machine; New picks
// it only with AVX-512.
func newWide() *Hasher { return &Hasher{wide: &wideHasher{}} }

func wideSum256(b []byte) (sum [32]byte) {
	h := newWide()
	h.Write(b)
	h.Sum(sum[:0])
	return sum
}

// The input of the BLAKE3 specification's test vectors: byte i is i mod 251.
func vectorInput(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// TestVectors checks digests from the official BLAKE3 test vectors
// (test_vectors.json of the BLAKE3 repository, "hash", first 32 bytes).
func TestVectors(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
		{1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
		{1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
		{1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
		{1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444"},
		{16384, "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4"},
		{2048, "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a"},
		{8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b"},
		{31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47"},
		{102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"},
	} {
		for name, got := range map[string][32]byte{"Sum256": Sum256(vectorInput(c.n)), "wide": wideSum256(vectorInput(c.n))} {
			if hex.EncodeToString(got[:]) != c.want {
				t.Errorf("%s, %d bytes: %x, want %s", name, c.n, got, c.want)
			}
		}
	}
}

// TestSameAsReference compares whole and split writes of many lengths,
// around the chunk (1 KiB) and batch (16 KiB) boundaries and at random, with
// zeebo/blake3.
func TestSameAsReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	lengths := []int{0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, batch - 1, batch, batch + 1,
		batch + 1024, 2 * batch, 2*batch + 1, 17 * 1024, 33 * 1024, 100_000, len(data)}
	for range 200 {
		lengths = append(lengths, r.IntN(len(data)+1))
	}
	for _, n := range lengths {
		want := reference.Sum256(data[:n])
		if got := wideSum256(data[:n]); got != want {
			t.Fatalf("%d bytes in one write: %x, want %x", n, got, want)
		}
		if got := splitSum(data[:n], r); !bytes.Equal(got, want[:]) {
			t.Fatalf("%d bytes in random writes: %x, want %x", n, got, want)
		}
		for _, piece := range []int{1024, batch, 3 * batch} { // writes that end on batch boundaries
			h := newWide()
			for b := data[:n]; len(b) > 0; b = b[min(piece, len(b)):] {
				h.Write(b[:min(piece, len(b))])
			}
			if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
				t.Fatalf("%d bytes in writes of %d: %x, want %x", n, piece, got, want)
			}
		}
	}
}

func TestBatchIsASubtree(t *testing.T) {
	if 1<<batchHeight != guts.MaxSIMD {
		t.Fatalf("batchHeight %d, but a batch is %d chunks", batchHeight, guts.MaxSIMD)
	}
}

// splitSum hashes b in writes of random sizes, small and large.
func splitSum(b []byte, r *rand.Rand) []byte {
	h := newWide()
	for len(b) > 0 {
		k := 1 + r.IntN(len(b))
		if r.IntN(3) == 0 {
			k = min(len(b), 1+r.IntN(40))
		}
		h.Write(b[:k])
		b = b[k:]
	}
	return h.Sum(nil)
}

func TestResetAndSumKeepState(t *testing.T) {
	narrow := func() *Hasher { return &Hasher{narrow: reference.New()} }
	for name, newHasher := range map[string]func() *Hasher{"New": New, "wide": newWide, "narrow": narrow} {
		t.Run(name, func(t *testing.T) { resetAndSumKeepState(t, newHasher()) })
	}
}

func resetAndSumKeepState(t *testing.T, h *Hasher) {
	h.Write(vectorInput(5000))
	h.Sum(nil) // Sum must not disturb the state
	h.Write(vectorInput(100))
	want := reference.Sum256(append(vectorInput(5000), vectorInput(100)...))
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("after Sum and more writes: %x, want %x", got, want)
	}
	h.Reset()
	h.Write([]byte("abc"))
	want = reference.Sum256([]byte("abc"))
	if got := h.Sum([]byte("prefix")); string(got[:6]) != "prefix" || !bytes.Equal(got[6:], want[:]) {
		t.Fatalf("after Reset: %x, want prefix and %x", got, want)
	}
}

// FuzzSameAsReference: any bytes, split at any points, hash as
// zeebo/blake3 hashes them whole.
func FuzzSameAsReference(f *testing.F) {
	f.Add(vectorInput(3000), uint64(7))
	f.Add(vectorInput(batch+5), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		want := reference.Sum256(b)
		if got := splitSum(b, rand.New(rand.NewPCG(seed, 0))); !bytes.Equal(got, want[:]) {
			t.Fatalf("%d bytes: %x, want %x", len(b), got, want)
		}
	})
}

func BenchmarkWrite(b *testing.B) {
	buf := vectorInput(8 << 20)
	b.SetBytes(int64(len(buf)))
	h := newWide()
	for b.Loop() {
		h.Write(buf)
	}
}

// BenchmarkSum256Small hashes inputs of at most a few batches, as the
// header regions, small tensors and the last bytes of every tensor are:
// the buffered last batch is compressed 16 chunks at once too.
func BenchmarkSum256Small(b *testing.B) {
	for _, n := range []int{1 << 10, 8 << 10, 16 << 10, 40 << 10} {
		buf := vectorInput(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Sum256(buf)
			}
		})
	}
}
