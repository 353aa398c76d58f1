package cast

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refFormat describes a narrow binary floating-point format by its field
// widths, independently of the code under test.
type refFormat struct {
	name      string
	expBits   uint
	manBits   uint
	bias      int
	values    []float64 // values[c] = value of non-negative code c, for c up to and including the Inf code
	infCode   uint16
	quietBit  uint16
	signBit   uint16
	nanExpAll uint16
}

// newRefFormat tabulates the value of every finite non-negative code in
// increasing order. The entry at the infinity code holds 2^(emax+1), the
// value the next code would have with an unbounded exponent, so that IEEE
// overflow (rounding to a value >= 2^(emax+1)) selects infinity.
func newRefFormat(name string, expBits, manBits uint) *refFormat {
	bias := 1<<(expBits-1) - 1
	inf := uint16((1<<expBits - 1) << manBits)
	f := &refFormat{name: name, expBits: expBits, manBits: manBits, bias: bias, infCode: inf,
		quietBit: 1 << (manBits - 1), signBit: 1 << (expBits + manBits), nanExpAll: inf}
	for c := 0; c <= int(inf); c++ {
		e := c >> manBits
		m := c & (1<<manBits - 1)
		var v float64
		if e == 0 {
			v = math.Ldexp(float64(m), 1-bias-int(manBits))
		} else {
			v = math.Ldexp(float64(1<<manBits+m), e-bias-int(manBits))
		}
		f.values = append(f.values, v)
	}
	return f
}

// round converts an F32 bit pattern to the format by explicit comparison
// with the two neighbouring representable values (round to nearest, ties to
// the even code). The float64 midpoint of two neighbours is exact (it needs
// manBits+2 significant bits), and so is the comparison with the F32 value.
func (f *refFormat) round(bits uint32) (code uint16, isNaN bool) {
	x := float64(math.Float32frombits(bits))
	if math.IsNaN(x) {
		return 0, true
	}
	var sign uint16
	if math.Signbit(x) {
		sign = f.signBit
		x = -x
	}
	i := sort.SearchFloat64s(f.values, x) // first index with values[i] >= x
	switch {
	case i == len(f.values): // beyond 2^(emax+1), or +Inf
		return sign | f.infCode, false
	case f.values[i] == x:
		return sign | uint16(i), false
	}
	lo, hi := i-1, i
	mid := (f.values[lo] + f.values[hi]) / 2
	switch {
	case x < mid:
		return sign | uint16(lo), false
	case x > mid:
		return sign | uint16(hi), false
	case lo%2 == 0:
		return sign | uint16(lo), false
	default:
		return sign | uint16(hi), false
	}
}

// randomF32 yields bit patterns that cover every class: uniform patterns,
// patterns concentrated around the narrow format's exponent range, and
// patterns whose dropped bits sit at or next to the halfway point.
func randomF32(r *rand.Rand, minExp, maxExp int, dropped uint) uint32 {
	b := r.Uint32()
	switch r.IntN(4) {
	case 0:
		return b
	case 1, 2:
		e := uint32(minExp + r.IntN(maxExp-minExp+1))
		b = b&0x807fffff | e<<23
	default:
		e := uint32(minExp + r.IntN(maxExp-minExp+1))
		b = b&0x807fffff | e<<23
		half := uint32(1) << (dropped - 1)
		b = b&^(1<<dropped-1) | half
		b += uint32(r.IntN(3)) - 1 // just below, at, or just above the tie
	}
	return b
}

func checkAgainstReference(t *testing.T, to string, ref *refFormat, n, minExp, maxExp int, dropped uint) {
	r := rand.New(rand.NewPCG(1, uint64(len(to))))
	const chunk = 1 << 16
	src := make([]byte, 4*chunk)
	dst := make([]byte, 2*chunk)
	bad := 0
	for done := 0; done < n; done += chunk {
		for i := 0; i < chunk; i++ {
			binary.LittleEndian.PutUint32(src[4*i:], randomF32(r, minExp, maxExp, dropped))
		}
		if err := Convert(dst, src, F32, to); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < chunk; i++ {
			in := binary.LittleEndian.Uint32(src[4*i:])
			got := binary.LittleEndian.Uint16(dst[2*i:])
			want, isNaN := ref.round(in)
			ok := got == want
			if isNaN {
				// NaN: a NaN code (all-ones exponent, non-zero mantissa), same
				// sign, quiet bit set.
				ok = got&ref.nanExpAll == ref.nanExpAll && got&ref.quietBit != 0 &&
					(got&ref.signBit != 0) == (in>>31 != 0)
			}
			if !ok && bad < 20 {
				bad++
				t.Errorf("F32->%s %#08x (%g): got %#04x, want %#04x (NaN %v)", to, in,
					math.Float32frombits(in), got, want, isNaN)
			}
		}
	}
}

func TestF32ToF16Reference(t *testing.T) {
	n := 4 << 20
	if testing.Short() {
		n = 1 << 18
	}
	// F16 exponents span 2^-24..2^15: F32 biased exponents 102..142; go a
	// little wider on both sides for underflow and overflow.
	checkAgainstReference(t, F16, newRefFormat("F16", 5, 10), n, 95, 145, 13)
}

func TestF32ToBF16Reference(t *testing.T) {
	n := 4 << 20
	if testing.Short() {
		n = 1 << 18
	}
	checkAgainstReference(t, BF16, newRefFormat("BF16", 8, 7), n, 0, 255, 16)
}

// TestRefFormatSanity pins a few values of the reference tables, so the
// reference itself is checked against hand-written numbers.
func TestRefFormatSanity(t *testing.T) {
	h := newRefFormat("F16", 5, 10)
	if h.infCode != 0x7c00 || h.values[0x3c00] != 1 || h.values[0x7bff] != 65504 ||
		h.values[0x0001] != math.Ldexp(1, -24) || h.values[0x0400] != math.Ldexp(1, -14) ||
		h.values[0x7c00] != 65536 {
		t.Error("F16 reference table is wrong")
	}
	b := newRefFormat("BF16", 8, 7)
	if b.infCode != 0x7f80 || b.values[0x3f80] != 1 || b.values[0x0001] != math.Ldexp(1, -133) ||
		b.values[0x7f7f] != float64(math.Float32frombits(0x7f7f0000)) || b.values[0x7f80] != math.Ldexp(1, 128) {
		t.Error("BF16 reference table is wrong")
	}
}
