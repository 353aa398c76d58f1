package artifact

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// stFile builds a file from a raw JSON header (no padding added) and data zero bytes.
func stFile(hdr string, data int) []byte {
	b := make([]byte, 8, 8+len(hdr)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	return append(b, make([]byte, data)...)
}

// stPrefix builds a file whose length prefix is n, followed by rest.
func stPrefix(n uint64, rest string) []byte {
	b := binary.LittleEndian.AppendUint64(nil, n)
	return append(b, rest...)
}

func stRead(b []byte) (*Header, error) { return ReadHeader(bytes.NewReader(b), int64(len(b))) }

func stKindOf(err error) FormatErrorKind {
	var fe *FormatError
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return ""
}

const stF32x4 = `{"dtype":"F32","shape":[4],"data_offsets":[0,16]}`

func TestReadHeaderRejects(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want FormatErrorKind
	}{
		{"empty file", nil, HeaderTooShort},
		{"seven bytes", []byte("\x02\x00\x00\x00\x00\x00\x00"), HeaderTooShort},
		{"length over cap", stPrefix(MaxHeaderLen+1, "{}"), HeaderTooLarge},
		{"length 2^64-1", stPrefix(^uint64(0), "{}"), HeaderTooLarge},
		{"length 2^63", stPrefix(1<<63, "{}"), HeaderTooLarge},
		{"header past EOF", stPrefix(100, `{"a":1}`), HeaderPastEOF},
		{"header at cap past EOF", stPrefix(MaxHeaderLen, "{}"), HeaderPastEOF},
		{"empty header", stPrefix(0, ""), HeaderNotJSON},
		{"not JSON", stFile("hello world", 0), HeaderNotJSON},
		{"not an object", stFile("[]", 0), HeaderNotJSON},
		{"leading space", stFile(" {}", 0), HeaderNotJSON},
		{"truncated JSON", stFile("{", 0), HeaderNotJSON},
		{"truncated entry", stFile(`{"a":{"dtype":"F32"`, 0), HeaderNotJSON},
		{"invalid UTF-8", stFile("{\"\xff\":{}}", 0), HeaderNotJSON},
		{"lone high surrogate", stFile(`{"\ud800":{}}`, 0), HeaderNotJSON},
		{"lone low surrogate", stFile(`{"__metadata__":{"k":"\udc00"}}`, 0), HeaderNotJSON},
		{"junk after object", stFile("{} x", 0), HeaderNotJSON},
		{"second object", stFile("{}{}", 0), HeaderNotJSON},
		{"NUL padding", stFile("{}\x00", 0), HeaderNotJSON},
		{"trailing comma", stFile(`{"__metadata__":{},}`, 0), HeaderNotJSON},
		{"missing comma", stFile(`{"__metadata__":{} "a":{}}`, 0), HeaderNotJSON},
		{"duplicate tensor", stFile(`{"a":`+stF32x4+`,"a":`+stF32x4+`}`, 16), DuplicateKey},
		{"duplicate tensor via escape", stFile(`{"a":`+stF32x4+`,"\u0061":`+stF32x4+`}`, 16), DuplicateKey},
		{"duplicate dtype", stFile(`{"a":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 16), DuplicateKey},
		{"duplicate shape", stFile(`{"a":{"dtype":"F32","shape":[4],"shape":[4],"data_offsets":[0,16]}}`, 16), DuplicateKey},
		{"duplicate offsets", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"data_offsets":[0,16]}}`, 16), DuplicateKey},
		{"duplicate metadata key", stFile(`{"__metadata__":{"k":"1","k":"2"}}`, 0), DuplicateKey},
		{"duplicate metadata object", stFile(`{"__metadata__":{},"__metadata__":{}}`, 0), DuplicateKey},
		{"metadata number", stFile(`{"__metadata__":{"k":1}}`, 0), BadMetadata},
		{"metadata null", stFile(`{"__metadata__":{"k":null}}`, 0), BadMetadata},
		{"metadata nested", stFile(`{"__metadata__":{"k":{"x":"y"}}}`, 0), BadMetadata},
		{"metadata array", stFile(`{"__metadata__":["k"]}`, 0), BadMetadata},
		{"metadata string", stFile(`{"__metadata__":"k"}`, 0), BadMetadata},
		{"entry not object", stFile(`{"a":5}`, 0), BadEntry},
		{"empty name", stFile(`{"":`+stF32x4+`}`, 16), BadEntry},
		{"unknown field", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}}`, 16), BadEntry},
		{"missing dtype", stFile(`{"a":{"shape":[4],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"missing shape", stFile(`{"a":{"dtype":"F32","data_offsets":[0,16]}}`, 16), BadEntry},
		{"missing offsets", stFile(`{"a":{"dtype":"F32","shape":[4]}}`, 16), BadEntry},
		{"dtype not string", stFile(`{"a":{"dtype":32,"shape":[4],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"shape not array", stFile(`{"a":{"dtype":"F32","shape":4,"data_offsets":[0,16]}}`, 16), BadEntry},
		{"shape nested", stFile(`{"a":{"dtype":"F32","shape":[[4]],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"shape negative", stFile(`{"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"shape float", stFile(`{"a":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"shape string", stFile(`{"a":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}}`, 16), BadEntry},
		{"offset negative", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}}`, 16), BadEntry},
		{"offset minus zero", stFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[-0,0]}}`, 0), BadEntry},
		{"offset float", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16.0]}}`, 16), BadEntry},
		{"offset exponent", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,1.6e1]}}`, 16), BadEntry},
		{"offset huge", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,99999999999999999999]}}`, 16), BadEntry},
		{"offset wraps uint64", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,20000000000000000000]}}`, 16), BadEntry},
		{"offset 2^63", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,9223372036854775808]}}`, 16), BadEntry},
		{"offset null", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,null]}}`, 16), BadEntry},
		{"three offsets", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16,16]}}`, 16), BadEntry},
		{"one offset", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[16]}}`, 16), BadEntry},
		{"unknown dtype", stFile(`{"a":{"dtype":"F128","shape":[4],"data_offsets":[0,16]}}`, 16), UnknownDType},
		{"lowercase dtype", stFile(`{"a":{"dtype":"f32","shape":[4],"data_offsets":[0,16]}}`, 16), UnknownDType},
		{"first begin not 0", stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[4,20]}}`, 20), OffsetsOutOfOrder},
		{"hole", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), OffsetsOutOfOrder},
		{"overlap", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), OffsetsOutOfOrder},
		{"same range twice", stFile(`{"a":`+stF32x4+`,"b":`+stF32x4+`}`, 16), OffsetsOutOfOrder},
		{"end before begin", stFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4), OffsetsOutOfOrder},
		{"end past file", stFile(`{"a":`+stF32x4+`}`, 8), OutOfFile},
		{"end far past file", stFile(`{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}`, 8), OutOfFile},
		{"shape/length mismatch", stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}`, 16), ShapeMismatch},
		{"scalar mismatch", stFile(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,8]}}`, 8), ShapeMismatch},
		{"shape product overflow", stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), ShapeMismatch},
		{"overflow then zero", stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, 0), ShapeMismatch},
		{"bit count overflow", stFile(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, 0), ShapeMismatch},
		{"wraps to length", stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967297],"data_offsets":[0,4294967296]}}`, 8), OutOfFile},
		{"F4 odd count", stFile(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2), ShapeMismatch},
		{"F4 odd count short", stFile(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}`, 1), ShapeMismatch},
		{"F6 partial byte", stFile(`{"a":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,2]}}`, 2), ShapeMismatch},
		{"trailing bytes", stFile(`{"a":`+stF32x4+`}`, 17), TrailingBytes},
		{"data without tensors", stFile(`{}`, 1), TrailingBytes},
		{"data with only metadata", stFile(`{"__metadata__":{}}`, 8), TrailingBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := stRead(tt.file)
			if err == nil {
				t.Fatalf("accepted: %+v", h)
			}
			if got := stKindOf(err); got != tt.want {
				t.Fatalf("kind = %q, want %q (err: %v)", got, tt.want, err)
			}
			if !errors.Is(err, errdefs.ErrDataLoss) {
				t.Fatalf("%v does not wrap errdefs.ErrDataLoss", err)
			}
			if !errdefs.IsDataLoss(err) {
				t.Fatalf("errdefs.IsDataLoss(%v) = false", err)
			}
		})
	}
}

func TestReadHeaderAccepts(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want Header
	}{
		{"empty object", stFile("{}", 0), Header{}},
		{"padded", stFile("{}      ", 0), Header{}},
		{"whitespace padding", stFile("{}\r\n\t ", 0), Header{}},
		{"metadata only", stFile(`{"__metadata__":{"format":"pt","k":""}}`, 0),
			Header{Metadata: map[string]string{"format": "pt", "k": ""}}},
		{"empty metadata", stFile(`{"__metadata__":{}}`, 0), Header{Metadata: map[string]string{}}},
		{"one tensor", stFile(`{"a":`+stF32x4+`}`, 16),
			Header{Tensors: []TensorInfo{{"a", "F32", []int64{4}, 0, 16}}}},
		{"scalar", stFile(`{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, 8),
			Header{Tensors: []TensorInfo{{"s", "I64", []int64{}, 0, 8}}}},
		{"F4 even count", stFile(`{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, 3),
			Header{Tensors: []TensorInfo{{"a", "F4", []int64{2, 3}, 0, 3}}}},
		{"F6 four elements", stFile(`{"a":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}`, 3),
			Header{Tensors: []TensorInfo{{"a", "F6_E2M3", []int64{4}, 0, 3}}}},
		{"sorted by offset, empty first", stFile(`{"z":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},`+
			`"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"y":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},`+
			`"a":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}`, 4),
			Header{Tensors: []TensorInfo{
				{"y", "U8", []int64{2}, 0, 2}, {"b", "U8", []int64{0}, 2, 2}, {"z", "U8", []int64{2}, 2, 4}, {"a", "U8", []int64{0}, 4, 4}}}},
		{"empty tensors only", stFile(`{"b":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[5,0],"data_offsets":[0,0]}}`, 0),
			Header{Tensors: []TensorInfo{{"a", "F32", []int64{5, 0}, 0, 0}, {"b", "F32", []int64{0, 5}, 0, 0}}}},
		{"escaped name and surrogate pair", stFile(`{"\ud83d\ude00\"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1),
			Header{Tensors: []TensorInfo{{"\U0001F600\"", "U8", []int64{1}, 0, 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := stRead(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.HeaderLen = int64(binary.LittleEndian.Uint64(tt.file))
			if !reflect.DeepEqual(*h, tt.want) {
				t.Fatalf("got %+v\nwant %+v", *h, tt.want)
			}
		})
	}
}

type stErrReader struct{ err error }

func (r stErrReader) ReadAt(p []byte, off int64) (int, error) { return 0, r.err }

// stLimitReader fails the test if asked for more than max bytes at once.
type stLimitReader struct {
	t   *testing.T
	r   io.ReaderAt
	max int
}

func (r stLimitReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > r.max {
		r.t.Fatalf("ReadAt of %d bytes", len(p))
	}
	return r.r.ReadAt(p, off)
}

func TestReadHeaderIO(t *testing.T) {
	boom := errors.New("boom")
	_, err := ReadHeader(stErrReader{boom}, 1<<20)
	if !errors.Is(err, boom) || stKindOf(err) != "" {
		t.Fatalf("err = %v, want wrapped boom and no FormatError", err)
	}
	// The caller claims a larger size than the reader holds.
	f := stFile(`{"a":`+stF32x4+`}`, 16)
	_, err = ReadHeader(bytes.NewReader(f[:20]), int64(len(f)))
	if !errors.Is(err, io.ErrUnexpectedEOF) || stKindOf(err) != "" {
		t.Fatalf("err = %v, want wrapped io.ErrUnexpectedEOF", err)
	}
	// A huge length prefix is rejected before the header is allocated or read.
	for _, n := range []uint64{MaxHeaderLen, MaxHeaderLen + 1, 1 << 62} {
		f := stPrefix(n, "{}")
		_, err = ReadHeader(stLimitReader{t, bytes.NewReader(f), 8}, int64(len(f)))
		if err == nil {
			t.Fatalf("accepted length %d", n)
		}
	}
}

func TestFormatErrorMessage(t *testing.T) {
	e := &FormatError{Kind: ShapeMismatch, Tensor: "x", Detail: "too long"}
	if got, want := e.Error(), `safetensors: shape mismatch: tensor "x": too long`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	e = &FormatError{Kind: HeaderTooLarge, Detail: "big"}
	if got, want := e.Error(), `safetensors: header too large: big`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestEncodeHeaderReferenceBytes(t *testing.T) {
	// Byte-for-byte what the reference implementation's serializer produces.
	tests := []struct {
		tensors []TensorInfo
		meta    map[string]string
		want    string
	}{
		{nil, nil, "\x08\x00\x00\x00\x00\x00\x00\x00{}      "},
		{nil, map[string]string{"framework": "pt"}, "\x28\x00\x00\x00\x00\x00\x00\x00" + `{"__metadata__":{"framework":"pt"}}` + "     "},
		{[]TensorInfo{{"attn.0", "F32", []int64{1, 2, 3}, 0, 24}}, nil,
			"\x40\x00\x00\x00\x00\x00\x00\x00" + `{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`},
		{[]TensorInfo{{"attn0", "F32", []int64{1, 1, 2, 3}, 0, 24}}, nil,
			"\x48\x00\x00\x00\x00\x00\x00\x00" + `{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}` + "       "},
		{[]TensorInfo{{"<a&b>\n\x01", "U8", []int64{}, 0, 1}}, nil,
			"\x40\x00\x00\x00\x00\x00\x00\x00" + `{"<a&b>\n\u0001":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`},
	}
	for _, tt := range tests {
		got, err := EncodeHeader(tt.tensors, tt.meta)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Fatalf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestWriteSafetensorsRoundTrip(t *testing.T) {
	// One tensor of every dtype, sizes chosen to misalign the data, plus
	// scalars and empty tensors.
	var tensors []WriteTensor
	for i, dt := range DTypes() {
		shape := []int64{int64(i%3 + 1), 8}
		n, ok := dt.TensorBytes(shape)
		if !ok {
			t.Fatalf("%s %v", dt.Name, shape)
		}
		data := bytes.Repeat([]byte{byte(i)}, int(n))
		tensors = append(tensors, WriteTensor{Name: "t." + dt.Name, DType: dt.Name, Shape: shape, Data: data})
	}
	tensors = append(tensors,
		WriteTensor{Name: "scalar", DType: "BF16", Shape: []int64{}, Data: []byte{1, 2}},
		WriteTensor{Name: "empty", DType: "F32", Shape: []int64{0, 3}, Data: nil},
		WriteTensor{Name: "odd", DType: "U8", Shape: []int64{3}, Data: []byte{7, 8, 9}},
	)
	meta := map[string]string{"format": "pt", "note": "</script> \"quoted\" \u2028"}
	for _, m := range []map[string]string{nil, meta} {
		var buf bytes.Buffer
		n, err := WriteSafetensors(&buf, tensors, m)
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(buf.Len()) {
			t.Fatalf("returned %d, wrote %d", n, buf.Len())
		}
		file := buf.Bytes()
		h, err := stRead(file)
		if err != nil {
			t.Fatal(err)
		}
		if h.DataStart()%8 != 0 {
			t.Fatalf("data starts at %d, not 8-aligned", h.DataStart())
		}
		if !reflect.DeepEqual(h.Metadata, m) {
			t.Fatalf("metadata %v, want %v", h.Metadata, m)
		}
		if len(h.Tensors) != len(tensors) {
			t.Fatalf("%d tensors, want %d", len(h.Tensors), len(tensors))
		}
		byName := make(map[string]TensorInfo)
		for _, ti := range h.Tensors {
			byName[ti.Name] = ti
		}
		for _, wt := range tensors {
			ti, ok := byName[wt.Name]
			if !ok {
				t.Fatalf("tensor %q missing", wt.Name)
			}
			if ti.DType != wt.DType || !reflect.DeepEqual(ti.Shape, wt.Shape) {
				t.Fatalf("tensor %q: got %+v", wt.Name, ti)
			}
			got := file[h.DataStart()+ti.Begin : h.DataStart()+ti.End]
			if !bytes.Equal(got, wt.Data) && len(wt.Data)+len(got) != 0 {
				t.Fatalf("tensor %q: data %x, want %x", wt.Name, got, wt.Data)
			}
		}
		// Re-encoding what was read gives the same header bytes.
		hdr, err := EncodeHeader(h.Tensors, h.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(hdr, file[:h.DataStart()]) {
			t.Fatalf("re-encoded header differs:\n%q\n%q", hdr, file[:h.DataStart()])
		}
		// PlanSafetensors agrees with what was written.
		specs := make([]TensorSpec, len(tensors))
		for i, wt := range tensors {
			specs[i] = TensorSpec{wt.Name, wt.DType, wt.Shape}
		}
		plan, infos, total, err := PlanSafetensors(specs, m)
		if err != nil {
			t.Fatal(err)
		}
		if total != n || !bytes.Equal(plan, hdr) || len(infos) != len(tensors) {
			t.Fatalf("plan: total %d (wrote %d), header equal %v", total, n, bytes.Equal(plan, hdr))
		}
		for i, info := range infos {
			if info.Name != tensors[i].Name || info.End-info.Begin != int64(len(tensors[i].Data)) {
				t.Fatalf("plan[%d] = %+v", i, info)
			}
		}
	}
}

func TestWriteSafetensorsRejects(t *testing.T) {
	u8 := func(name string, n int) WriteTensor {
		return WriteTensor{Name: name, DType: "U8", Shape: []int64{int64(n)}, Data: make([]byte, n)}
	}
	tests := []struct {
		name    string
		tensors []WriteTensor
		meta    map[string]string
		want    FormatErrorKind
	}{
		{"duplicate name", []WriteTensor{u8("a", 1), u8("a", 2)}, nil, DuplicateKey},
		{"empty name", []WriteTensor{u8("", 1)}, nil, BadEntry},
		{"reserved name", []WriteTensor{u8("__metadata__", 1)}, nil, BadEntry},
		{"invalid UTF-8 name", []WriteTensor{u8("a\xff", 1)}, nil, BadEntry},
		{"invalid UTF-8 metadata", []WriteTensor{u8("a", 1)}, map[string]string{"k": "\xff"}, BadMetadata},
		{"unknown dtype", []WriteTensor{{Name: "a", DType: "Q4", Shape: []int64{1}, Data: []byte{0}}}, nil, UnknownDType},
		{"negative dim", []WriteTensor{{Name: "a", DType: "U8", Shape: []int64{-1}}}, nil, BadEntry},
		{"data too short", []WriteTensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: make([]byte, 7)}}, nil, ShapeMismatch},
		{"data too long", []WriteTensor{{Name: "a", DType: "U8", Shape: []int64{}, Data: make([]byte, 2)}}, nil, ShapeMismatch},
		{"F4 odd count", []WriteTensor{{Name: "a", DType: "F4", Shape: []int64{3}, Data: make([]byte, 2)}}, nil, ShapeMismatch},
		{"overflow", []WriteTensor{{Name: "a", DType: "F64", Shape: []int64{1 << 62}}}, nil, ShapeMismatch},
		{"total overflow", []WriteTensor{{Name: "a", DType: "U8", Shape: []int64{1 << 62}}, {Name: "b", DType: "U8", Shape: []int64{1 << 62}},
			{Name: "c", DType: "U8", Shape: []int64{1 << 62}}}, nil, ShapeMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			n, err := WriteSafetensors(&buf, tt.tensors, tt.meta)
			if got := stKindOf(err); got != tt.want {
				t.Fatalf("kind = %q, want %q (err: %v)", got, tt.want, err)
			}
			if n != 0 || buf.Len() != 0 {
				t.Fatalf("wrote %d bytes before failing", buf.Len())
			}
			if !errors.Is(err, errdefs.ErrDataLoss) {
				t.Fatalf("%v does not wrap errdefs.ErrDataLoss", err)
			}
		})
	}
}

func TestEncodeHeaderRejectsBadLayout(t *testing.T) {
	tests := []struct {
		name    string
		tensors []TensorInfo
		want    FormatErrorKind
	}{
		{"hole", []TensorInfo{{"a", "U8", []int64{1}, 0, 1}, {"b", "U8", []int64{1}, 2, 3}}, OffsetsOutOfOrder},
		{"not from zero", []TensorInfo{{"a", "U8", []int64{1}, 1, 2}}, OffsetsOutOfOrder},
		{"length mismatch", []TensorInfo{{"a", "U16", []int64{1}, 0, 1}}, ShapeMismatch},
		{"negative offset", []TensorInfo{{"a", "U8", []int64{0}, -1, -1}}, BadEntry},
	}
	for _, tt := range tests {
		_, err := EncodeHeader(tt.tensors, nil)
		if got := stKindOf(err); got != tt.want {
			t.Errorf("%s: kind = %q, want %q (err: %v)", tt.name, got, tt.want, err)
		}
	}
	// Any order is accepted and encodes identically.
	a := []TensorInfo{{"a", "U8", []int64{1}, 0, 1}, {"b", "U8", []int64{1}, 1, 2}}
	b := []TensorInfo{a[1], a[0]}
	ha, err1 := EncodeHeader(a, nil)
	hb, err2 := EncodeHeader(b, nil)
	if err1 != nil || err2 != nil || !bytes.Equal(ha, hb) {
		t.Fatalf("order changed the encoding: %v %v\n%q\n%q", err1, err2, ha, hb)
	}
}

func TestWriteSafetensorsWriteError(t *testing.T) {
	boom := errors.New("disk full")
	_, err := WriteSafetensors(stFailWriter{boom}, []WriteTensor{{Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}}, nil)
	if !errors.Is(err, boom) || stKindOf(err) != "" {
		t.Fatalf("err = %v", err)
	}
}

type stFailWriter struct{ err error }

func (w stFailWriter) Write(p []byte) (int, error) { return 0, w.err }

// stManyTensors returns a file of n F16 tensors with realistic names.
func stManyTensors(tb testing.TB, n int) []byte {
	tensors := make([]WriteTensor, n)
	for i := range tensors {
		tensors[i] = WriteTensor{
			Name:  fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", i),
			DType: "F16",
			Shape: []int64{2, int64(i%4 + 1)},
			Data:  make([]byte, 4*(i%4+1)),
		}
	}
	var buf bytes.Buffer
	if _, err := WriteSafetensors(&buf, tensors, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadHeaderManyTensors(t *testing.T) {
	f := stManyTensors(t, 10_000)
	start := time.Now()
	h, err := stRead(f)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != 10_000 {
		t.Fatalf("%d tensors", len(h.Tensors))
	}
	t.Logf("10,000 tensors (%d-byte header) in %v", h.HeaderLen, elapsed)
	// Loose bound so as not to flake on slow or instrumented builds; see BenchmarkReadHeader.
	if elapsed > time.Second {
		t.Errorf("took %v", elapsed)
	}
}

func BenchmarkReadHeader(b *testing.B) {
	f := stManyTensors(b, 10_000)
	r := bytes.NewReader(f)
	b.SetBytes(8 + int64(binary.LittleEndian.Uint64(f))) // header bytes parsed per op
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadHeader(r, int64(len(f))); err != nil {
			b.Fatal(err)
		}
	}
}
