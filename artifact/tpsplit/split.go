package tpsplit

import (
	"math/bits"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// Split is the plan for one tensor: how its full row-major data is divided
// among TPSize ranks. Build it with Spec.Plan.
type Split struct {
	Tensor     string  // tensor name
	DType      string  // safetensors dtype
	Shape      []int64 // full, unpadded shape
	TPSize     int     // number of ranks
	Rule       int     // index of the rule applied in Spec.Rules; -1 for the default
	Replicated bool    // every rank gets the whole tensor
	Dim        int     // split dimension; -1 when replicated
	Size       int64   // Shape[Dim]; 0 when replicated
	PaddedSize int64   // Size padded per pad_to_multiple (== Size without padding); 0 when replicated

	bits    int   // element width in bits
	srcLen  int64 // byte length of the full tensor
	outer   int64 // product of Shape[:Dim]
	rowLen  int64 // bytes per index of Dim: product of Shape[Dim+1:] * element size
	shardSz int64 // PaddedSize / TPSize
}

// Plan decides how the tensor is split for tpSize ranks (see the package
// documentation for the rules). The error names the tensor.
func (s *Spec) Plan(name, dtype string, shape []int64, tpSize int) (Split, error) {
	if tpSize < 1 {
		return Split{}, invalid(name, "tp size %d, want >= 1", tpSize)
	}
	dt, ok := artifact.LookupDType(dtype)
	nbits := dt.Bits
	if !ok {
		return Split{}, invalid(name, "unknown dtype %q", dtype)
	}
	numel := int64(1)
	for _, d := range shape {
		if d < 0 {
			return Split{}, invalid(name, "negative dimension in shape %v", shape)
		}
		if numel, ok = mul(numel, d); !ok {
			return Split{}, invalid(name, "shape %v overflows", shape)
		}
	}
	totalBits, ok := mul(numel, int64(nbits))
	if !ok {
		return Split{}, invalid(name, "shape %v overflows", shape)
	}
	p := Split{Tensor: name, DType: dtype, Shape: slices.Clone(shape), TPSize: tpSize,
		Rule: s.Match(name), Replicated: true, Dim: -1, bits: nbits, srcLen: (totalBits + 7) / 8}

	if p.Rule < 0 {
		if s.Default == DefaultError {
			return Split{}, invalid(name, "no rule of layout %q matches and its default is %q", s.Name, DefaultError)
		}
		return p, nil
	}
	r := s.Rules[p.Rule]
	rank := len(shape)
	dim := -1
	switch {
	case r.Split == Replicated:
		return p, nil
	case r.Dim != nil:
		dim = *r.Dim
		if dim < 0 {
			dim += rank
		}
		if dim < 0 || dim >= rank {
			return Split{}, invalid(name, "rule %q: dim %d out of range for shape %v", r.Pattern, *r.Dim, shape)
		}
	case r.Split == Column:
		if rank == 0 {
			return Split{}, invalid(name, "rule %q: cannot split a 0-D tensor", r.Pattern)
		}
		dim = 0
	case r.Split == Row:
		if rank < 2 {
			return p, nil // bias of a row-parallel layer
		}
		dim = rank - 1
	}
	if nbits%8 != 0 {
		return Split{}, failure(name, "cannot split sub-byte dtype "+dtype+" (only replication is supported)", errdefs.ErrNotImplemented)
	}

	size := shape[dim]
	padded := size
	if m := r.PadToMultiple; m > 0 {
		unit, ok := mul(m, int64(tpSize))
		if !ok {
			return Split{}, invalid(name, "pad_to_multiple %d * tp size %d overflows", m, tpSize)
		}
		q := size / unit
		if size%unit != 0 {
			q++
		}
		if padded, ok = mul(q, unit); !ok {
			return Split{}, invalid(name, "padding dim %d of size %d overflows", dim, size)
		}
	} else if size%int64(tpSize) != 0 {
		return Split{}, invalid(name, "rule %q: dim %d of shape %v (size %d) is not divisible by tp size %d and the rule has no pad_to_multiple", r.Pattern, dim, shape, size, tpSize)
	}

	esize := int64(nbits / 8)
	p.outer, p.rowLen = 1, esize
	for _, d := range shape[:dim] {
		p.outer *= d // no overflow: a factor of numel
	}
	for _, d := range shape[dim+1:] {
		p.rowLen *= d
	}
	if _, ok := mul(p.outer, padded); !ok {
		return Split{}, invalid(name, "padded shape overflows")
	}
	if _, ok := mul(p.outer*padded, p.rowLen); !ok {
		return Split{}, invalid(name, "padded shape overflows")
	}
	p.Replicated, p.Dim, p.Size, p.PaddedSize = false, dim, size, padded
	p.shardSz = padded / int64(tpSize)
	return p, nil
}

// mul returns a*b for non-negative a and b, and whether it fits in an int64.
func mul(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return int64(lo), hi == 0 && lo <= 1<<63-1
}

// SrcLen returns the byte length of the full tensor data.
func (p Split) SrcLen() int64 { return p.srcLen }

// ShardShape returns the shape of rank's shard: the full shape when
// replicated, otherwise the full shape with dimension Dim replaced by
// PaddedSize/TPSize. All ranks have the same shard shape. It returns nil
// for a rank out of range.
func (p Split) ShardShape(rank int) []int64 {
	if rank < 0 || rank >= p.TPSize {
		return nil
	}
	s := slices.Clone(p.Shape)
	if s == nil {
		s = []int64{}
	}
	if !p.Replicated {
		s[p.Dim] = p.shardSz
	}
	return s
}

// ShardLen returns the byte length of rank's shard, or -1 for a rank out of
// range.
func (p Split) ShardLen(rank int) int64 {
	if rank < 0 || rank >= p.TPSize {
		return -1
	}
	if p.Replicated {
		return p.srcLen
	}
	return p.outer * p.shardSz * p.rowLen
}

// Extract writes rank's shard into dst, taking it from src, the full tensor
// in row-major order. len(src) must be SrcLen() and len(dst) ShardLen(rank).
// Padding that falls in this rank's shard is written as zero bytes. It copies
// whole contiguous runs: one for a split of dimension 0, one per row for a
// split of the last dimension.
func (p Split) Extract(dst, src []byte, rank int) error {
	if rank < 0 || rank >= p.TPSize {
		return invalid(p.Tensor, "rank %d out of range for tp size %d", rank, p.TPSize)
	}
	if int64(len(src)) != p.srcLen {
		return invalid(p.Tensor, "source is %d bytes, want %d", len(src), p.srcLen)
	}
	if want := p.ShardLen(rank); int64(len(dst)) != want {
		return invalid(p.Tensor, "destination is %d bytes, want %d for rank %d", len(dst), want, rank)
	}
	if p.Replicated {
		copy(dst, src)
		return nil
	}
	start := int64(rank) * p.shardSz
	have := max(0, min(p.shardSz, p.Size-start)) // indices of this shard that hold data
	run := have * p.rowLen                       // bytes copied per outer index
	pad := (p.shardSz - have) * p.rowLen         // zero bytes per outer index
	if pad == 0 && have == p.Size {              // the shard is the whole tensor
		copy(dst, src)
		return nil
	}
	srcStride, dstStride := p.Size*p.rowLen, p.shardSz*p.rowLen
	so, do := start*p.rowLen, int64(0)
	for o := int64(0); o < p.outer; o++ {
		if run > 0 {
			copy(dst[do:do+run], src[so:so+run])
		}
		if pad > 0 {
			clear(dst[do+run : do+dstStride])
		}
		so += srcStride
		do += dstStride
	}
	return nil
}
