// Package cast is the conversion of little-endian tensor data between the
// floating-point dtypes F32, F16 and BF16 (safetensors names).
//
// Narrowing conversions round to nearest, ties to even, and are correct for
// every value class: normals, subnormals (F16 subnormals as source and as
// result, including results that round up to the smallest normal), underflow
// to a signed zero, overflow to a signed infinity, signed zeros and
// infinities. A NaN stays a NaN with its sign and the high bits of its
// payload, and always comes out quiet (the quiet bit is set, so a NaN is never
// turned into an infinity by dropping mantissa bits). BF16 <-> F16 goes
// through the exact F32 value, so it rounds once.
//
// Conversion loops do not allocate; the caller provides the destination.
package cast

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/containerd/errdefs"
)

// Safetensors dtype names handled by this package.
const (
	F32  = "F32"
	F16  = "F16"
	BF16 = "BF16"
)

// failure is a refused conversion from one dtype to another, classified
// errdefs.ErrNotImplemented for an unsupported dtype pair and
// errdefs.ErrInvalidArgument for bad buffer lengths.
func failure(from, to, reason string, class error) error {
	return fmt.Errorf("cast %s -> %s: %s: %w", from, to, reason, class)
}

// ElemSize returns the byte size of one element of a supported dtype, or 0.
func ElemSize(dtype string) int {
	switch dtype {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// Supported reports whether Convert handles the pair: any combination of
// F32, F16 and BF16, including identity.
func Supported(from, to string) bool {
	return ElemSize(from) != 0 && ElemSize(to) != 0
}

// OutLen returns the destination byte length for n source bytes converted
// from one dtype to another. n must be a whole number of source elements.
func OutLen(n int, from, to string) (int, error) {
	fs, ts := ElemSize(from), ElemSize(to)
	if fs == 0 || ts == 0 {
		return 0, failure(from, to, "unsupported dtype pair", errdefs.ErrNotImplemented)
	}
	if n < 0 || n%fs != 0 {
		return 0, failure(from, to, fmt.Sprintf("source length %d is not a multiple of %d", n, fs), errdefs.ErrInvalidArgument)
	}
	return n / fs * ts, nil
}

// Convert converts src (elements of dtype from) into dst (elements of dtype
// to), both little-endian. len(dst) must equal OutLen(len(src), from, to).
// dst and src must not overlap unless they are identical and from == to.
func Convert(dst, src []byte, from, to string) error {
	want, err := OutLen(len(src), from, to)
	if err != nil {
		return err
	}
	if len(dst) != want {
		return failure(from, to, fmt.Sprintf("destination length %d, want %d for %d source bytes", len(dst), want, len(src)), errdefs.ErrInvalidArgument)
	}
	switch {
	case from == to:
		copy(dst, src)
	case from == F32 && to == BF16:
		f32ToBF16Slice(dst, src)
	case from == BF16 && to == F32:
		bf16ToF32Slice(dst, src)
	case from == F32 && to == F16:
		f32ToF16Slice(dst, src)
	case from == F16 && to == F32:
		f16ToF32Slice(dst, src)
	case from == BF16 && to == F16:
		bf16ToF16Slice(dst, src)
	case from == F16 && to == BF16:
		f16ToBF16Slice(dst, src)
	}
	return nil
}

const (
	f32QuietBit  = 0x00400000
	f16QuietBit  = 0x0200
	bf16QuietBit = 0x0040
)

// F32ToBF16 converts one F32 bit pattern to BF16, rounding to nearest even.
func F32ToBF16(f uint32) uint16 {
	if f&0x7fffffff > 0x7f800000 { // NaN: keep sign and high payload, make quiet
		return uint16(f>>16) | bf16QuietBit
	}
	// Adding 0x7fff plus the lowest kept bit rounds half to even; a carry
	// out of the mantissa correctly bumps the exponent (up to infinity).
	f += 0x7fff + (f>>16)&1
	return uint16(f >> 16)
}

// BF16ToF32 converts one BF16 bit pattern to F32 (exact; NaNs come out quiet).
func BF16ToF32(h uint16) uint32 {
	if h&0x7fff > 0x7f80 {
		h |= bf16QuietBit
	}
	return uint32(h) << 16
}

// F32ToF16 converts one F32 bit pattern to F16, rounding to nearest even.
func F32ToF16(f uint32) uint16 {
	sign := uint16(f>>16) & 0x8000
	a := f & 0x7fffffff
	switch {
	case a >= 0x477ff000: // >= 65520 (halfway above 65504, ties to Inf), Inf or NaN
		if a > 0x7f800000 {
			return sign | 0x7c00 | f16QuietBit | uint16(a>>13)&0x3ff
		}
		return sign | 0x7c00
	case a >= 0x38800000: // >= 2^-14: normal F16 result
		a -= (127 - 15) << 23 // rebias exponent
		a += 0xfff + (a>>13)&1
		return sign | uint16(a>>13)
	case a <= 0x33000000: // <= 2^-25: halfway to the smallest subnormal or less, rounds to zero
		return sign
	}
	// Subnormal F16 result, in units of 2^-24: m * 2^(e-126).
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e // 14..24
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++ // may carry into the smallest normal, 0x0400, which is correct
	}
	return sign | uint16(r)
}

// F16ToF32 converts one F16 bit pattern to F32 (exact; NaNs come out quiet).
func F16ToF32(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch e {
	case 0x1f:
		if m == 0 {
			return sign | 0x7f800000
		}
		return sign | 0x7f800000 | f32QuietBit | m<<13
	case 0:
		if m == 0 {
			return sign
		}
		// Subnormal m * 2^-24: normalize so the leading bit becomes implicit.
		l := uint32(bits.Len32(m)) // 1..10
		return sign | (l+102)<<23 | (m<<(24-l))&0x7fffff
	}
	return sign | (e+127-15)<<23 | m<<13
}

var le = binary.LittleEndian

// The slice loops below handle four elements per iteration through array
// pointers, so that the compiler drops per-element bounds checks and merges
// loads and stores; a scalar loop handles the tail.

func f32ToBF16Slice(dst, src []byte) {
	const lanes = 0x0000000100000001 // two 32-bit lanes
	const abs, nanBias, top = 0x7fffffff * lanes, 0x007fffff * lanes, 0x80000000 * lanes
	for len(src) >= 16 && len(dst) >= 8 {
		s, d := (*[16]byte)(src), (*[8]byte)(dst)
		a, b := le.Uint64(s[0:8]), le.Uint64(s[8:16])
		// A lane's bit 31 becomes set iff its magnitude exceeds 0x7f800000,
		// i.e. it is a NaN (no carry crosses lanes).
		if ((a&abs+nanBias)|(b&abs+nanBias))&top != 0 {
			le.PutUint64(d[:], uint64(F32ToBF16(uint32(a)))|uint64(F32ToBF16(uint32(a>>32)))<<16|
				uint64(F32ToBF16(uint32(b)))<<32|uint64(F32ToBF16(uint32(b>>32)))<<48)
		} else {
			// Round half to even in both lanes at once, as in F32ToBF16;
			// without NaNs a lane stays below 0xff808000, so no carry
			// crosses lanes.
			a += 0x7fff*lanes + (a>>16)&lanes
			b += 0x7fff*lanes + (b>>16)&lanes
			le.PutUint64(d[:], (a>>16)&0xffff|(a>>32)&0xffff0000|(b<<16)&0xffff00000000|b&0xffff000000000000)
		}
		src, dst = src[16:], dst[8:]
	}
	for len(src) >= 4 && len(dst) >= 2 {
		le.PutUint16(dst, F32ToBF16(le.Uint32(src)))
		src, dst = src[4:], dst[2:]
	}
}

func bf16ToF32Slice(dst, src []byte) {
	const lanes = 0x0001000100010001 // four 16-bit lanes
	for len(src) >= 8 && len(dst) >= 16 {
		s, d := (*[8]byte)(src), (*[16]byte)(dst)
		a := le.Uint64(s[:])
		// Quiet every NaN lane without a branch: bit 15 of a lane becomes
		// set iff the lane's magnitude exceeds 0x7f80 (no carry crosses
		// lanes, magnitudes are at most 0x7fff); shifted right by 9 it is
		// the BF16 quiet bit 0x0040.
		a |= (a&(0x7fff*lanes) + 0x007f*lanes) & (0x8000 * lanes) >> 9
		// Widen: each BF16 becomes the high half of its F32.
		le.PutUint64(d[0:8], (a&0xffff)<<16|(a&0xffff0000)<<32)
		le.PutUint64(d[8:16], (a>>16)&0xffff0000|a&0xffff000000000000)
		src, dst = src[8:], dst[16:]
	}
	for len(src) >= 2 && len(dst) >= 4 {
		le.PutUint32(dst, BF16ToF32(le.Uint16(src)))
		src, dst = src[2:], dst[4:]
	}
}

func f32ToF16Slice(dst, src []byte) {
	for len(src) >= 16 && len(dst) >= 8 {
		s, d := (*[16]byte)(src), (*[8]byte)(dst)
		a, b := le.Uint64(s[0:8]), le.Uint64(s[8:16])
		le.PutUint64(d[:], uint64(F32ToF16(uint32(a)))|uint64(F32ToF16(uint32(a>>32)))<<16|
			uint64(F32ToF16(uint32(b)))<<32|uint64(F32ToF16(uint32(b>>32)))<<48)
		src, dst = src[16:], dst[8:]
	}
	for len(src) >= 4 && len(dst) >= 2 {
		le.PutUint16(dst, F32ToF16(le.Uint32(src)))
		src, dst = src[4:], dst[2:]
	}
}

// 16-bit sources use lookup tables over all 65536 bit patterns, built on
// first use from the scalar functions (which the tests check exhaustively).
var (
	f16ToF32Table  = sync.OnceValue(func() *[1 << 16]uint32 { return table32(F16ToF32) })
	bf16ToF16Table = sync.OnceValue(func() *[1 << 16]uint16 {
		return table16(func(h uint16) uint16 { return F32ToF16(BF16ToF32(h)) })
	})
	f16ToBF16Table = sync.OnceValue(func() *[1 << 16]uint16 {
		return table16(func(h uint16) uint16 { return F32ToBF16(F16ToF32(h)) })
	})
)

func table32(f func(uint16) uint32) *[1 << 16]uint32 {
	t := new([1 << 16]uint32)
	for i := range t {
		t[i] = f(uint16(i))
	}
	return t
}

func table16(f func(uint16) uint16) *[1 << 16]uint16 {
	t := new([1 << 16]uint16)
	for i := range t {
		t[i] = f(uint16(i))
	}
	return t
}

func f16ToF32Slice(dst, src []byte) {
	t := f16ToF32Table()
	for len(src) >= 8 && len(dst) >= 16 {
		s, d := (*[8]byte)(src), (*[16]byte)(dst)
		a := le.Uint64(s[:])
		le.PutUint64(d[0:8], uint64(t[uint16(a)])|uint64(t[uint16(a>>16)])<<32)
		le.PutUint64(d[8:16], uint64(t[uint16(a>>32)])|uint64(t[uint16(a>>48)])<<32)
		src, dst = src[8:], dst[16:]
	}
	for len(src) >= 2 && len(dst) >= 4 {
		le.PutUint32(dst, t[le.Uint16(src)])
		src, dst = src[2:], dst[4:]
	}
}

func map16(t *[1 << 16]uint16, dst, src []byte) {
	for len(src) >= 8 && len(dst) >= 8 {
		s, d := (*[8]byte)(src), (*[8]byte)(dst)
		a := le.Uint64(s[:])
		le.PutUint64(d[:], uint64(t[uint16(a)])|uint64(t[uint16(a>>16)])<<16|
			uint64(t[uint16(a>>32)])<<32|uint64(t[uint16(a>>48)])<<48)
		src, dst = src[8:], dst[8:]
	}
	for len(src) >= 2 && len(dst) >= 2 {
		le.PutUint16(dst, t[le.Uint16(src)])
		src, dst = src[2:], dst[2:]
	}
}

func bf16ToF16Slice(dst, src []byte) { map16(bf16ToF16Table(), dst, src) }

func f16ToBF16Slice(dst, src []byte) { map16(f16ToBF16Table(), dst, src) }
