package artifact

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// WriteTensor is one tensor for WriteSafetensors.
type WriteTensor struct {
	Name, DType string
	Shape       []int64
	Data        []byte
}

// TensorSpec is one tensor for PlanSafetensors: everything but the data.
type TensorSpec struct {
	Name, DType string
	Shape       []int64
}

// EncodeHeader returns the 8-byte little-endian length prefix followed by the
// JSON header for tensors, padded with spaces to a multiple of 8 bytes so the
// data buffer is 8-byte aligned. Tensors may come in any order; they must form
// a valid layout (contiguous from 0, lengths matching shapes), and are written
// sorted by offsets, after __metadata__ (written when metadata is non-nil, keys
// sorted). The output is deterministic and accepted by ReadHeader. Invalid
// input yields a *FormatError.
func EncodeHeader(tensors []TensorInfo, metadata map[string]string) ([]byte, error) {
	seen := make(map[string]struct{}, len(tensors))
	for _, t := range tensors {
		switch {
		case t.Name == "":
			return nil, stErr(BadEntry, "", "empty tensor name")
		case t.Name == stMetadataKey:
			return nil, stErr(BadEntry, t.Name, "tensor name is reserved")
		case !utf8.ValidString(t.Name):
			return nil, stErr(BadEntry, t.Name, "tensor name is not valid UTF-8")
		}
		if _, dup := seen[t.Name]; dup {
			return nil, stErr(DuplicateKey, t.Name, "tensor name repeated")
		}
		seen[t.Name] = struct{}{}
		for i, d := range t.Shape {
			if d < 0 {
				return nil, stErr(BadEntry, t.Name, "shape[%d] is negative (%d)", i, d)
			}
		}
		if t.Begin < 0 || t.End < 0 {
			return nil, stErr(BadEntry, t.Name, "negative data_offsets [%d, %d]", t.Begin, t.End)
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, stErr(BadMetadata, "", "__metadata__ entry %q is not valid UTF-8", k)
		}
	}
	sorted := slices.Clone(tensors)
	stSortTensors(sorted)
	if _, err := stCheckLayout(sorted, -1); err != nil {
		return nil, err
	}

	buf := make([]byte, 8, 8+64*len(sorted)+64)
	buf = append(buf, '{')
	if metadata != nil {
		buf = stAppendString(buf, stMetadataKey)
		buf = append(buf, ":{"...)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = stAppendString(buf, k)
			buf = append(buf, ':')
			buf = stAppendString(buf, metadata[k])
		}
		buf = append(buf, '}')
	}
	for i, t := range sorted {
		if i > 0 || metadata != nil {
			buf = append(buf, ',')
		}
		buf = stAppendString(buf, t.Name)
		buf = append(buf, `:{"dtype":`...)
		buf = stAppendString(buf, t.DType)
		buf = append(buf, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, d, 10)
		}
		buf = append(buf, `],"data_offsets":[`...)
		buf = strconv.AppendInt(buf, t.Begin, 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, t.End, 10)
		buf = append(buf, "]}"...)
	}
	buf = append(buf, '}')
	for len(buf)%8 != 0 {
		buf = append(buf, ' ')
	}
	n := len(buf) - 8
	if n > MaxHeaderLen {
		return nil, stErr(HeaderTooLarge, "", "header length %d exceeds %d", n, MaxHeaderLen)
	}
	binary.LittleEndian.PutUint64(buf[:8], uint64(n))
	return buf, nil
}

// stAppendString appends s as a JSON string, escaped as serde_json (the
// reference implementation's encoder) does: no HTML escaping.
func stAppendString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			if c < 0x20 {
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			} else {
				buf = append(buf, c)
			}
		}
	}
	return append(buf, '"')
}

// PlanSafetensors lays specs out contiguously in the given order and returns
// the encoded header (length prefix included, as from EncodeHeader), the
// tensors with their offsets (in the order of specs, offsets relative to the
// data buffer, which starts at len(header)), and the total file size. A
// streaming producer writes header and then each tensor's End-Begin bytes in
// order.
func PlanSafetensors(specs []TensorSpec, metadata map[string]string) (header []byte, infos []TensorInfo, total int64, err error) {
	infos = make([]TensorInfo, len(specs))
	var off int64
	for i, s := range specs {
		dt, ok := LookupDType(s.DType)
		if !ok {
			return nil, nil, 0, stErr(UnknownDType, s.Name, "unknown dtype %q", s.DType)
		}
		n, kind, why := dt.tensorBytes(s.Shape)
		if why != "" {
			return nil, nil, 0, stErr(kind, s.Name, "%s", why)
		}
		if n > math.MaxInt64-off {
			return nil, nil, 0, stErr(ShapeMismatch, s.Name, "data buffer size overflows")
		}
		shape := slices.Clone(s.Shape)
		if shape == nil {
			shape = []int64{}
		}
		infos[i] = TensorInfo{Name: s.Name, DType: s.DType, Shape: shape, Begin: off, End: off + n}
		off += n
	}
	header, err = EncodeHeader(infos, metadata)
	if err != nil {
		return nil, nil, 0, err
	}
	if off > math.MaxInt64-int64(len(header)) {
		return nil, nil, 0, stErr(ShapeMismatch, "", "file size overflows")
	}
	return header, infos, int64(len(header)) + off, nil
}

// WriteSafetensors writes a safetensors file holding tensors, laid out in the
// given order, and returns the number of bytes written. Each tensor's Data
// must be exactly as long as its shape and dtype imply; everything is checked
// before the first byte is written.
func WriteSafetensors(w io.Writer, tensors []WriteTensor, metadata map[string]string) (int64, error) {
	specs := make([]TensorSpec, len(tensors))
	for i, t := range tensors {
		specs[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	header, infos, _, err := PlanSafetensors(specs, metadata)
	if err != nil {
		return 0, err
	}
	for i, t := range tensors {
		if want := infos[i].End - infos[i].Begin; int64(len(t.Data)) != want {
			return 0, stErr(ShapeMismatch, t.Name, "shape %v of %s is %d bytes, data is %d", t.Shape, t.DType, want, len(t.Data))
		}
	}
	var written int64
	n, err := w.Write(header)
	written += int64(n)
	if err != nil {
		return written, fmt.Errorf("safetensors: writing header: %w", err)
	}
	for _, t := range tensors {
		n, err := w.Write(t.Data)
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("safetensors: writing tensor %q: %w", t.Name, err)
		}
	}
	return written, nil
}
