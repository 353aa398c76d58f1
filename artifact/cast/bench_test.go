package cast

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

const benchBytes = 64 << 20 // 64 MiB of source data

// benchConvert converts 64 MiB of weight-like data (normally distributed
// values, as in a checkpoint) from one dtype to another.
func benchConvert(b *testing.B, from, to string) {
	r := rand.New(rand.NewPCG(7, 7))
	f32 := make([]byte, 2*benchBytes)
	for i := 0; i < len(f32); i += 4 {
		binary.LittleEndian.PutUint32(f32[i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	src := f32[:benchBytes]
	if from != F32 {
		if err := Convert(src, f32, F32, from); err != nil {
			b.Fatal(err)
		}
	}
	n, err := OutLen(len(src), from, to)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, n)
	if err := Convert(dst, src, from, to); err != nil { // builds lookup tables once
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Convert(dst, src, from, to); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkF32ToBF16(b *testing.B) { benchConvert(b, F32, BF16) }
func BenchmarkBF16ToF32(b *testing.B) { benchConvert(b, BF16, F32) }
func BenchmarkF32ToF16(b *testing.B)  { benchConvert(b, F32, F16) }
func BenchmarkF16ToF32(b *testing.B)  { benchConvert(b, F16, F32) }
func BenchmarkBF16ToF16(b *testing.B) { benchConvert(b, BF16, F16) }
func BenchmarkF16ToBF16(b *testing.B) { benchConvert(b, F16, BF16) }
func BenchmarkCopy(b *testing.B)      { benchConvert(b, BF16, BF16) }
