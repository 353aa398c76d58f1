package cast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// Expected bit patterns below are written out by hand, not computed by the
// code under test.

type vec32to16 struct {
	name string
	in   uint32
	want uint16
}

type vec16to32 struct {
	name string
	in   uint16
	want uint32
}

type vec16to16 struct {
	name string
	in   uint16
	want uint16
}

var f32ToF16Vectors = []vec32to16{
	{"+0", 0x00000000, 0x0000},
	{"-0", 0x80000000, 0x8000},
	{"1.0", 0x3f800000, 0x3c00},
	{"-2.0", 0xc0000000, 0xc000},
	{"0.1", 0x3dcccccd, 0x2e66},
	{"pi", 0x40490fdb, 0x4248},
	{"tie 1+2^-11 to even", 0x3f801000, 0x3c00},
	{"tie 1+3*2^-11 to even", 0x3f803000, 0x3c02},
	{"above tie 1+2^-11", 0x3f801001, 0x3c01},
	{"below tie 1+2^-11", 0x3f800fff, 0x3c00},
	{"tie 2-2^-11 carries into exponent", 0x3ffff000, 0x4000},
	{"max 65504", 0x477fe000, 0x7bff},
	{"65519.996 rounds to 65504", 0x477fefff, 0x7bff},
	{"65520 rounds to +Inf", 0x477ff000, 0x7c00},
	{"-65520 rounds to -Inf", 0xc77ff000, 0xfc00},
	{"1e10 overflows", 0x501502f9, 0x7c00},
	{"max f32 overflows", 0x7f7fffff, 0x7c00},
	{"-max f32 overflows", 0xff7fffff, 0xfc00},
	{"+Inf", 0x7f800000, 0x7c00},
	{"-Inf", 0xff800000, 0xfc00},
	{"qNaN", 0x7fc00000, 0x7e00},
	{"-qNaN", 0xffc00000, 0xfe00},
	{"sNaN low payload becomes qNaN not Inf", 0x7f800001, 0x7e00},
	{"-sNaN low payload", 0xff800001, 0xfe00},
	{"sNaN high payload kept", 0x7fa00000, 0x7f00},
	{"-sNaN high payload kept", 0xffa00000, 0xff00},
	{"smallest normal 2^-14", 0x38800000, 0x0400},
	{"-smallest normal", 0xb8800000, 0x8400},
	{"largest subnormal", 0x387fc000, 0x03ff},
	{"tie below smallest normal rounds up to normal", 0x387fe000, 0x0400},
	{"just below that tie", 0x387fdfff, 0x03ff},
	{"2^-15 subnormal", 0x38000000, 0x0200},
	{"smallest subnormal 2^-24", 0x33800000, 0x0001},
	{"-smallest subnormal", 0xb3800000, 0x8001},
	{"2^-25 tie rounds to +0", 0x33000000, 0x0000},
	{"-2^-25 tie rounds to -0", 0xb3000000, 0x8000},
	{"just above 2^-25 rounds up", 0x33000001, 0x0001},
	{"-just above 2^-25 rounds up", 0xb3000001, 0x8001},
	{"1.5*2^-24 tie to even 2", 0x33c00000, 0x0002},
	{"2.5*2^-24 tie to even 2", 0x34200000, 0x0002},
	{"3*2^-24 exact", 0x34400000, 0x0003},
	{"2^-26 underflows", 0x32800000, 0x0000},
	{"smallest f32 subnormal underflows", 0x00000001, 0x0000},
	{"-smallest f32 subnormal underflows to -0", 0x80000001, 0x8000},
	{"largest f32 subnormal underflows", 0x007fffff, 0x0000},
}

var f16ToF32Vectors = []vec16to32{
	{"+0", 0x0000, 0x00000000},
	{"-0", 0x8000, 0x80000000},
	{"1.0", 0x3c00, 0x3f800000},
	{"-2.0", 0xc000, 0xc0000000},
	{"0.1 rounded", 0x2e66, 0x3dccc000},
	{"max 65504", 0x7bff, 0x477fe000},
	{"-max", 0xfbff, 0xc77fe000},
	{"smallest normal", 0x0400, 0x38800000},
	{"largest subnormal", 0x03ff, 0x387fc000},
	{"2^-15 subnormal", 0x0200, 0x38000000},
	{"3*2^-24 subnormal", 0x0003, 0x34400000},
	{"smallest subnormal", 0x0001, 0x33800000},
	{"-smallest subnormal", 0x8001, 0xb3800000},
	{"+Inf", 0x7c00, 0x7f800000},
	{"-Inf", 0xfc00, 0xff800000},
	{"qNaN", 0x7e00, 0x7fc00000},
	{"-qNaN", 0xfe00, 0xffc00000},
	{"sNaN becomes quiet", 0x7c01, 0x7fc02000},
	{"sNaN payload kept", 0x7d00, 0x7fe00000},
	{"-sNaN", 0xfc01, 0xffc02000},
}

var f32ToBF16Vectors = []vec32to16{
	{"+0", 0x00000000, 0x0000},
	{"-0", 0x80000000, 0x8000},
	{"1.0", 0x3f800000, 0x3f80},
	{"0.1", 0x3dcccccd, 0x3dcd},
	{"tie 1+2^-8 to even", 0x3f808000, 0x3f80},
	{"tie 1+3*2^-8 to even", 0x3f818000, 0x3f82},
	{"above tie", 0x3f808001, 0x3f81},
	{"below tie", 0x3f807fff, 0x3f80},
	{"carry into exponent", 0x3fffffff, 0x4000},
	{"max f32 overflows", 0x7f7fffff, 0x7f80},
	{"-max f32 overflows", 0xff7fffff, 0xff80},
	{"tie at max bf16 rounds to Inf", 0x7f7f8000, 0x7f80},
	{"below tie at max bf16", 0x7f7f7fff, 0x7f7f},
	{"+Inf", 0x7f800000, 0x7f80},
	{"-Inf", 0xff800000, 0xff80},
	{"qNaN", 0x7fc00000, 0x7fc0},
	{"-qNaN", 0xffc00000, 0xffc0},
	{"sNaN low payload becomes qNaN not Inf", 0x7f800001, 0x7fc0},
	{"-sNaN low payload", 0xff800001, 0xffc0},
	{"sNaN high payload kept", 0x7f810000, 0x7fc1},
	{"qNaN with payload not rounded", 0x7fffffff, 0x7fff},
	{"f32 subnormal underflows", 0x00000001, 0x0000},
	{"-f32 subnormal underflows", 0x80000001, 0x8000},
	{"subnormal tie to even 0", 0x00008000, 0x0000},
	{"subnormal tie to even 2", 0x00018000, 0x0002},
	{"subnormal above tie", 0x00008001, 0x0001},
	{"subnormal exact", 0x00400000, 0x0040},
	{"largest subnormal rounds to smallest normal", 0x007fffff, 0x0080},
	{"-largest subnormal rounds to smallest normal", 0x807fffff, 0x8080},
}

var bf16ToF32Vectors = []vec16to32{
	{"+0", 0x0000, 0x00000000},
	{"-0", 0x8000, 0x80000000},
	{"1.0", 0x3f80, 0x3f800000},
	{"0.1", 0x3dcd, 0x3dcd0000},
	{"smallest subnormal", 0x0001, 0x00010000},
	{"max", 0x7f7f, 0x7f7f0000},
	{"+Inf", 0x7f80, 0x7f800000},
	{"-Inf", 0xff80, 0xff800000},
	{"qNaN", 0x7fc0, 0x7fc00000},
	{"sNaN becomes quiet", 0x7f81, 0x7fc10000},
	{"-sNaN becomes quiet", 0xff81, 0xffc10000},
}

var bf16ToF16Vectors = []vec16to16{
	{"+0", 0x0000, 0x0000},
	{"-0", 0x8000, 0x8000},
	{"1.0", 0x3f80, 0x3c00},
	{"65280 exact", 0x477f, 0x7bf8},
	{"-65280 exact", 0xc77f, 0xfbf8},
	{"65536 overflows", 0x4780, 0x7c00},
	{"-65536 overflows", 0xc780, 0xfc00},
	{"smallest f16 normal", 0x3880, 0x0400},
	{"subnormal exact 1020*2^-24", 0x387f, 0x03fc},
	{"smallest f16 subnormal", 0x3380, 0x0001},
	{"2^-25 tie to +0", 0x3300, 0x0000},
	{"-2^-25 tie to -0", 0xb300, 0x8000},
	{"0.75*2^-24 rounds up", 0x3340, 0x0001},
	{"1.5*2^-24 tie to even 2", 0x33c0, 0x0002},
	{"1.99*2^-24 rounds up", 0x33ff, 0x0002},
	{"2.03*2^-24 rounds down", 0x3401, 0x0002},
	{"bf16 subnormal underflows", 0x0001, 0x0000},
	{"-bf16 subnormal underflows", 0x8001, 0x8000},
	{"+Inf", 0x7f80, 0x7c00},
	{"-Inf", 0xff80, 0xfc00},
	{"qNaN", 0x7fc0, 0x7e00},
	{"-qNaN", 0xffc0, 0xfe00},
	{"sNaN becomes quiet", 0x7f81, 0x7e08},
}

var f16ToBF16Vectors = []vec16to16{
	{"+0", 0x0000, 0x0000},
	{"-0", 0x8000, 0x8000},
	{"1.0", 0x3c00, 0x3f80},
	{"1+2^-10 rounds down", 0x3c01, 0x3f80},
	{"tie 1+2^-8 to even", 0x3c04, 0x3f80},
	{"tie 1+3*2^-8 to even", 0x3c0c, 0x3f82},
	{"above tie", 0x3c05, 0x3f81},
	{"65504 rounds to 65536", 0x7bff, 0x4780},
	{"-65504 rounds to -65536", 0xfbff, 0xc780},
	{"smallest subnormal", 0x0001, 0x3380},
	{"largest subnormal rounds to 2^-14", 0x03ff, 0x3880},
	{"+Inf", 0x7c00, 0x7f80},
	{"-Inf", 0xfc00, 0xff80},
	{"qNaN", 0x7e00, 0x7fc0},
	{"-qNaN", 0xfe00, 0xffc0},
	{"sNaN low payload becomes qNaN not Inf", 0x7c01, 0x7fc0},
	{"sNaN high payload kept", 0x7d00, 0x7fe0},
}

// convert1 runs Convert on a single element given as raw little-endian bits.
func convert1(t *testing.T, in uint32, from, to string) uint32 {
	t.Helper()
	src := make([]byte, ElemSize(from))
	if len(src) == 4 {
		binary.LittleEndian.PutUint32(src, in)
	} else {
		binary.LittleEndian.PutUint16(src, uint16(in))
	}
	// Surround the element with others to catch indexing mistakes.
	src = append(append(append([]byte{}, make([]byte, len(src))...), src...), make([]byte, len(src))...)
	n, err := OutLen(len(src), from, to)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := Convert(dst, src, from, to); err != nil {
		t.Fatal(err)
	}
	es := ElemSize(to)
	if es == 4 {
		return binary.LittleEndian.Uint32(dst[es:])
	}
	return uint32(binary.LittleEndian.Uint16(dst[es:]))
}

func TestVectors(t *testing.T) {
	for _, v := range f32ToF16Vectors {
		if got := convert1(t, v.in, F32, F16); got != uint32(v.want) {
			t.Errorf("F32->F16 %s: %#08x -> %#04x, want %#04x", v.name, v.in, got, v.want)
		}
	}
	for _, v := range f32ToBF16Vectors {
		if got := convert1(t, v.in, F32, BF16); got != uint32(v.want) {
			t.Errorf("F32->BF16 %s: %#08x -> %#04x, want %#04x", v.name, v.in, got, v.want)
		}
	}
	for _, v := range f16ToF32Vectors {
		if got := convert1(t, uint32(v.in), F16, F32); got != v.want {
			t.Errorf("F16->F32 %s: %#04x -> %#08x, want %#08x", v.name, v.in, got, v.want)
		}
	}
	for _, v := range bf16ToF32Vectors {
		if got := convert1(t, uint32(v.in), BF16, F32); got != v.want {
			t.Errorf("BF16->F32 %s: %#04x -> %#08x, want %#08x", v.name, v.in, got, v.want)
		}
	}
	for _, v := range bf16ToF16Vectors {
		if got := convert1(t, uint32(v.in), BF16, F16); got != uint32(v.want) {
			t.Errorf("BF16->F16 %s: %#04x -> %#04x, want %#04x", v.name, v.in, got, v.want)
		}
	}
	for _, v := range f16ToBF16Vectors {
		if got := convert1(t, uint32(v.in), F16, BF16); got != uint32(v.want) {
			t.Errorf("F16->BF16 %s: %#04x -> %#04x, want %#04x", v.name, v.in, got, v.want)
		}
	}
	for _, dt := range []string{F32, F16, BF16} {
		for _, in := range []uint32{0x0000, 0x8001, 0x7c01, 0x3c00} {
			if got := convert1(t, in, dt, dt); got != in {
				t.Errorf("%s identity: %#x -> %#x", dt, in, got)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		from, to string
		src, dst int
		kind     error
	}{
		{"F32", "I8", 4, 1, errdefs.ErrNotImplemented},
		{"F8_E4M3", "F16", 1, 2, errdefs.ErrNotImplemented},
		{"f32", "F16", 4, 2, errdefs.ErrNotImplemented},
		{"F32", "F16", 6, 3, errdefs.ErrInvalidArgument},  // src not whole elements
		{"F32", "F16", 8, 2, errdefs.ErrInvalidArgument},  // dst too short
		{"F16", "F32", 4, 10, errdefs.ErrInvalidArgument}, // dst too long
		{"BF16", "BF16", 3, 3, errdefs.ErrInvalidArgument},
	}
	for _, c := range cases {
		err := Convert(make([]byte, c.dst), make([]byte, c.src), c.from, c.to)
		if !errors.Is(err, c.kind) || !strings.HasPrefix(err.Error(), "cast "+c.from+" -> "+c.to+": ") {
			t.Errorf("Convert %s->%s src %d dst %d: got %v, want a cast failure wrapping %v", c.from, c.to, c.src, c.dst, err, c.kind)
		}
	}
	if Supported("F32", "I8") || !Supported(BF16, F16) || !Supported(F32, F32) {
		t.Error("Supported gives wrong answers")
	}
	if n, err := OutLen(12, F32, BF16); err != nil || n != 6 {
		t.Errorf("OutLen(12, F32, BF16) = %d, %v", n, err)
	}
	if err := Convert(nil, nil, F32, F16); err != nil {
		t.Errorf("empty conversion: %v", err)
	}
}

// TestRoundTripExhaustive checks, for every 16-bit pattern, that
// F16->F32->F16 and BF16->F32->BF16 are the identity, except that NaNs come
// back quiet with their sign and payload otherwise unchanged. It also checks
// every widened value against an independent table of the format's values,
// and the bulk loops against the scalar functions.
func TestRoundTripExhaustive(t *testing.T) {
	for _, c := range []struct {
		dt       string
		ref      *refFormat
		scalar   func(uint16) uint32
		narrow   func(uint32) uint16
		isNaN    func(uint16) bool
		quietBit uint16
	}{
		{F16, newRefFormat("F16", 5, 10), F16ToF32, F32ToF16,
			func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }, 0x0200},
		{BF16, newRefFormat("BF16", 8, 7), BF16ToF32, F32ToBF16,
			func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }, 0x0040},
	} {
		src := make([]byte, 2*65536)
		for i := 0; i < 65536; i++ {
			binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
		}
		wide := make([]byte, 4*65536)
		if err := Convert(wide, src, c.dt, F32); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, len(src))
		if err := Convert(back, wide, F32, c.dt); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := 0; i < 65536; i++ {
			h := uint16(i)
			got := binary.LittleEndian.Uint16(back[2*i:])
			f := binary.LittleEndian.Uint32(wide[4*i:])
			if f != c.scalar(h) || got != c.narrow(f) {
				t.Fatalf("%s %#04x: bulk and scalar conversions disagree", c.dt, h)
			}
			want := h
			if c.isNaN(h) {
				want = h | c.quietBit
				if f&0x7fffffff <= 0x7f800000 || f&0x00400000 == 0 || f>>31 != uint32(h>>15) {
					t.Errorf("%s %#04x: F32 %#08x is not a quiet NaN of the same sign", c.dt, h, f)
				}
			} else {
				v := c.ref.values[h&^c.ref.signBit]
				if h&^c.ref.signBit == c.ref.infCode {
					v = math.Inf(1)
				}
				if h&c.ref.signBit != 0 {
					v = -v
				}
				if x := float64(math.Float32frombits(f)); x != v || math.Signbit(x) != (h>>15 == 1) {
					t.Errorf("%s %#04x -> F32 %#08x = %g, want %g", c.dt, h, f, x, v)
				}
			}
			if got != want && bad < 20 {
				bad++
				t.Errorf("%s %#04x -> F32 %#08x -> %#04x, want %#04x", c.dt, h, f, got, want)
			}
		}
	}
}

func ExampleConvert() {
	src := []byte{0x00, 0x00, 0x80, 0x3f} // 1.0 as F32
	dst := make([]byte, 2)
	if err := Convert(dst, src, F32, BF16); err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", dst)
	// Output: 80 3f
}
