package artifact

import (
	"slices"
	"strings"
	"testing"
)

func TestDTypeTable(t *testing.T) {
	want := map[string]int{
		"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
		"I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
		"I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
	}
	all := DTypes()
	if len(all) != len(want) {
		t.Fatalf("%d dtypes, want %d", len(all), len(want))
	}
	if !slices.IsSortedFunc(all, func(a, b DType) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatalf("DTypes not sorted: %v", all)
	}
	for _, d := range all {
		if want[d.Name] != d.Bits {
			t.Errorf("%s: %d bits, want %d", d.Name, d.Bits, want[d.Name])
		}
		if got, ok := LookupDType(d.Name); !ok || got != d {
			t.Errorf("LookupDType(%q) = %v, %v", d.Name, got, ok)
		}
	}
	for _, name := range []string{"", "f32", "F8", "FP4", "F4_E2M1", "INT4", "Q4_0", "C128", "F32 "} {
		if d, ok := LookupDType(name); ok {
			t.Errorf("LookupDType(%q) = %v", name, d)
		}
	}
	// DTypes returns a copy.
	all[0].Bits = 99
	if DTypes()[0].Bits == 99 {
		t.Fatal("DTypes shares its backing array")
	}
}

func TestTensorBytes(t *testing.T) {
	tests := []struct {
		dtype string
		shape []int64
		want  int64
		ok    bool
	}{
		{"F32", nil, 4, true},
		{"F32", []int64{}, 4, true},
		{"F32", []int64{2, 3}, 24, true},
		{"BF16", []int64{0, 1 << 40}, 0, true},
		{"C64", []int64{3}, 24, true},
		{"BOOL", []int64{5}, 5, true},
		{"F4", []int64{2}, 1, true},
		{"F4", []int64{3}, 0, false}, // 12 bits
		{"F4", []int64{}, 0, false},  // a scalar F4 is 4 bits
		{"F4", []int64{3, 2}, 3, true},
		{"F6_E2M3", []int64{4}, 3, true},
		{"F6_E3M2", []int64{2}, 0, false}, // 12 bits
		{"F6_E3M2", []int64{8}, 6, true},
		{"U8", []int64{-1}, 0, false},
		{"U8", []int64{1 << 62, 4}, 0, false},          // element count overflows
		{"U8", []int64{1 << 62, 1 << 62, 0}, 0, false}, // overflow before the zero
		{"F64", []int64{1 << 61}, 0, false},            // bit count overflows
		{"U8", []int64{1<<61 - 1}, 1<<61 - 1, true},    // the most bits that fit in 64
		{"U8", []int64{1 << 61}, 0, false},             // 2^64 bits
		{"F4", []int64{1 << 60, 2}, 1 << 60, true},     // 2^63 bits
		{"F4", []int64{1 << 62, 2}, 0, false},          // 2^65 bits
		{"F16", []int64{1 << 31, 1 << 31}, 0, false},   // 2^66 bits
	}
	for _, tt := range tests {
		d, _ := LookupDType(tt.dtype)
		got, ok := d.TensorBytes(tt.shape)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s %v: got %d, %v; want %d, %v", tt.dtype, tt.shape, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := (DType{Name: "X"}).TensorBytes([]int64{1}); ok {
		t.Error("zero-width dtype accepted")
	}
}
