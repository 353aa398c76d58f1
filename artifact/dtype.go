package artifact

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// DType describes one safetensors element type.
type DType struct {
	Name string
	Bits int // bits per element; sub-byte kinds have Bits < 8
}

// stDTypeList is the safetensors dtype table, sorted by name, as in the
// reference implementation's Dtype::bitsize (huggingface/safetensors,
// safetensors/src/tensor.rs, checked against its main branch of May 2026).
var stDTypeList = []DType{
	{"BF16", 16},
	{"BOOL", 8},
	{"C64", 64}, // complex64: two F32 parts
	{"F16", 16},
	{"F32", 32},
	{"F4", 4}, // MXFP4 (E2M1), two elements per byte
	{"F64", 64},
	{"F6_E2M3", 6}, // MXFP6
	{"F6_E3M2", 6}, // MXFP6
	{"F8_E4M3", 8},
	{"F8_E4M3FNUZ", 8},
	{"F8_E5M2", 8},
	{"F8_E5M2FNUZ", 8},
	{"F8_E8M0", 8},
	{"I16", 16},
	{"I32", 32},
	{"I64", 64},
	{"I8", 8},
	{"U16", 16},
	{"U32", 32},
	{"U64", 64},
	{"U8", 8},
}

// stDTypes indexes stDTypeList by name.
var stDTypes = func() map[string]DType {
	m := make(map[string]DType, len(stDTypeList))
	for _, d := range stDTypeList {
		m[d.Name] = d
	}
	return m
}()

// LookupDType returns the dtype with the given safetensors name. Names are
// case-sensitive, as in the reference implementation.
func LookupDType(name string) (DType, bool) {
	d, ok := stDTypes[name]
	return d, ok
}

// DTypes returns every known dtype, sorted by name.
func DTypes() []DType { return slices.Clone(stDTypeList) }

// TensorBytes returns the byte length of a tensor of this dtype and shape.
// It fails when a dimension is negative, when the product of the shape times
// the element width overflows 64 bits at any step (as in the reference, a
// later zero dimension does not rescue an earlier overflow), or when the total
// number of bits is not a whole number of bytes (sub-byte dtypes).
func (d DType) TensorBytes(shape []int64) (int64, bool) {
	n, _, why := d.tensorBytes(shape)
	return n, why == ""
}

// tensorBytes is TensorBytes with the reason for a failure.
func (d DType) tensorBytes(shape []int64) (int64, FormatErrorKind, string) {
	if d.Bits <= 0 {
		return 0, UnknownDType, fmt.Sprintf("unknown dtype %q", d.Name)
	}
	elems := uint64(1)
	for i, dim := range shape {
		if dim < 0 {
			return 0, BadEntry, fmt.Sprintf("shape[%d] is negative (%d)", i, dim)
		}
		hi, lo := bits.Mul64(elems, uint64(dim))
		if hi != 0 {
			return 0, ShapeMismatch, fmt.Sprintf("shape %v: element count overflows", shape)
		}
		elems = lo
	}
	hi, nbits := bits.Mul64(elems, uint64(d.Bits))
	if hi != 0 {
		return 0, ShapeMismatch, fmt.Sprintf("shape %v of %s: bit count overflows", shape, d.Name)
	}
	if nbits%8 != 0 {
		return 0, ShapeMismatch, fmt.Sprintf("shape %v of %s is %d bits, not a whole number of bytes", shape, d.Name, nbits)
	}
	// nbits/8 < 2^61, so it always fits in int64.
	return int64(nbits / 8), "", ""
}

// stSortTensors sorts by offsets, then by name: empty tensors sharing a begin
// with a non-empty one come first, so a valid layout is always contiguous.
func stSortTensors(ts []TensorInfo) {
	slices.SortFunc(ts, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), strings.Compare(a.Name, b.Name))
	})
}

// stCheckLayout checks tensors sorted by offsets: contiguous from 0, each
// exactly as long as its shape and dtype, and (when dataLen >= 0) within the
// data buffer. It returns the end of the last tensor.
func stCheckLayout(ts []TensorInfo, dataLen int64) (int64, error) {
	var prev int64
	for i := range ts {
		t := &ts[i]
		switch {
		case i == 0 && t.Begin != 0:
			return 0, stErr(OffsetsOutOfOrder, t.Name, "first tensor begins at %d, not 0", t.Begin)
		case t.Begin > prev:
			return 0, stErr(OffsetsOutOfOrder, t.Name, "hole: begins at %d, previous tensor ends at %d", t.Begin, prev)
		case t.Begin < prev:
			return 0, stErr(OffsetsOutOfOrder, t.Name, "overlap: begins at %d, previous tensor ends at %d", t.Begin, prev)
		case t.End < t.Begin:
			return 0, stErr(OffsetsOutOfOrder, t.Name, "ends at %d before it begins at %d", t.End, t.Begin)
		case dataLen >= 0 && t.End > dataLen:
			return 0, stErr(OutOfFile, t.Name, "ends at data offset %d but the data buffer is %d bytes", t.End, dataLen)
		}
		dt, ok := LookupDType(t.DType)
		if !ok {
			return 0, stErr(UnknownDType, t.Name, "unknown dtype %q", t.DType)
		}
		n, kind, why := dt.tensorBytes(t.Shape)
		if why != "" {
			return 0, stErr(kind, t.Name, "%s", why)
		}
		if n != t.End-t.Begin {
			return 0, stErr(ShapeMismatch, t.Name, "shape %v of %s is %d bytes, offsets [%d, %d) span %d",
				t.Shape, t.DType, n, t.Begin, t.End, t.End-t.Begin)
		}
		prev = t.End
	}
	return prev, nil
}
