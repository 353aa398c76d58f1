// Package blake3 is the store's BLAKE3 (unkeyed, 256-bit digests), of a
// whole input and of its 1 MiB pieces (piece.go). Where the CPU has
// AVX-512 it is the tree mode of the BLAKE3 specification, driven on one
// goroutine over the compression functions of lukechampine.com/blake3/guts,
// which hash 16 chunks at once; elsewhere it is zeebo/blake3 (pieces are
// always the guts tree).
//
// zeebo/blake3 has no AVX-512 code, and lukechampine.com/blake3's own
// Hasher starts a goroutine per 16 KiB, which costs more than it gains
// where every core already hashes a file of its own. Without AVX-512 guts
// falls back to 8 chunks at once with AVX2, slower than zeebo's own AVX2
// code: hence zeebo on such CPUs.
package blake3

import (
	"math/bits"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/cpu"
	"lukechampine.com/blake3/guts"
)

// haveAVX512 says whether this CPU hashes with guts: the test guts itself
// makes before it takes its AVX-512 code.
var haveAVX512 = cpu.X86.HasAVX512F

// batch is the bytes one call of guts.CompressBuffer takes: a complete
// subtree of guts.MaxSIMD chunks.
const batch = guts.MaxSIMD * guts.ChunkSize

// batchHeight is the height of that subtree: log2(guts.MaxSIMD).
const batchHeight = 4

// Hasher computes a BLAKE3 digest; it implements hash.Hash.
type Hasher struct {
	// One of the two is set.
	narrow *blake3.Hasher
	wide   *wideHasher
}

// New returns a Hasher for 256-bit unkeyed digests.
func New() *Hasher {
	if !haveAVX512 {
		return &Hasher{narrow: blake3.New()}
	}
	return &Hasher{wide: &wideHasher{}}
}

// Sum256 returns the BLAKE3 digest of b.
func Sum256(b []byte) (sum [32]byte) {
	if !haveAVX512 {
		return blake3.Sum256(b)
	}
	var h wideHasher
	h.write(b)
	h.sum(sum[:0])
	return sum
}

// Write implements io.Writer; it never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	if h.narrow != nil {
		return h.narrow.Write(p)
	}
	h.wide.write(p)
	return len(p), nil
}

// Sum appends the digest of the bytes written so far to b; the Hasher
// can go on.
func (h *Hasher) Sum(b []byte) []byte {
	if h.narrow != nil {
		return h.narrow.Sum(b)
	}
	return h.wide.sum(b)
}

// Reset forgets every byte written.
func (h *Hasher) Reset() {
	if h.narrow != nil {
		h.narrow.Reset()
		return
	}
	h.wide.reset()
}

// Size is the digest's length in bytes.
func (h *Hasher) Size() int { return 32 }

// BlockSize is BLAKE3's block size.
func (h *Hasher) BlockSize() int { return guts.BlockSize }

// wideHasher is the BLAKE3 tree over guts.
type wideHasher struct {
	tree tree
	// buf holds the last bytes written, up to a batch, until more come or
	// Sum: every batch is compressed 16 chunks at once, the last one at Sum,
	// where its last chunk, or the subtree it ends, may be the root.
	buf    [batch]byte
	buflen int
}

// tree is the state of the hash tree left of the buffered bytes: the
// chaining values of complete subtrees, at most one per height; bit i of
// counter (the chunks hashed so far) says whether height i is occupied.
// base is the chunk counter of its first chunk: 0 for a whole input, a
// piece's first chunk for a piece (piece.go).
type tree struct {
	stack   [64][8]uint32
	counter uint64
	base    uint64
}

// push adds the chaining value of a complete subtree of 2^height chunks,
// merging it with the subtrees to its left that it completes.
func (t *tree) push(cv [8]uint32, height int) {
	i := height
	for t.counter&(1<<i) != 0 {
		cv = guts.ChainingValue(guts.ParentNode(t.stack[i], cv, &guts.IV, 0))
		i++
	}
	t.stack[i] = cv
	t.counter += 1 << height
}

// pushBatch compresses a whole batch; the tree's chunk count is a
// multiple of guts.MaxSIMD, so the batch is a complete subtree.
func (t *tree) pushBatch(b []byte) {
	t.push(guts.ChainingValue(guts.CompressBuffer((*[batch]byte)(b), batch, &guts.IV, t.base+t.counter, 0)), batchHeight)
}

// reset forgets every byte written; the base stays.
func (h *wideHasher) reset() { h.tree.counter, h.buflen = 0, 0 }

func (h *wideHasher) write(p []byte) {
	if h.buflen > 0 {
		k := copy(h.buf[h.buflen:], p)
		h.buflen += k
		p = p[k:]
		if len(p) == 0 {
			return
		}
		h.tree.pushBatch(h.buf[:])
		h.buflen = 0
	}
	for len(p) > batch {
		h.tree.pushBatch(p[:batch])
		p = p[batch:]
	}
	h.buflen = copy(h.buf[:], p)
}

// sum is the digest: the top node, compressed as the root.
func (h *wideHasher) sum(b []byte) []byte {
	node := h.top()
	node.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(node))
	return append(b, out[:32]...)
}

// top compresses the buffered bytes, the last subtree of the tree (its
// chunks at once, merged as BLAKE3 merges a right edge of fewer than
// guts.MaxSIMD chunks), and merges it with the complete subtrees on its
// left, all larger, into the tree's top node, not compressed yet.
func (h *wideHasher) top() guts.Node {
	t := &h.tree
	node := guts.CompressBuffer(&h.buf, h.buflen, &guts.IV, t.base+t.counter, 0)
	for i := bits.TrailingZeros64(t.counter); i < bits.Len64(t.counter); i++ {
		if t.counter&(1<<i) != 0 {
			node = guts.ParentNode(t.stack[i], guts.ChainingValue(node), &guts.IV, 0)
		}
	}
	return node
}
