package artifact

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/containerd/errdefs"
)

func stFuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	write := func(tensors []WriteTensor, meta map[string]string) {
		var buf bytes.Buffer
		if _, err := WriteSafetensors(&buf, tensors, meta); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	write(nil, nil)
	write(nil, map[string]string{"format": "pt"})
	write([]WriteTensor{
		{Name: "w", DType: "F32", Shape: []int64{2, 2}, Data: make([]byte, 16)},
		{Name: "b", DType: "BF16", Shape: []int64{3}, Data: make([]byte, 6)},
		{Name: "e", DType: "I64", Shape: []int64{0}},
		{Name: "s", DType: "U8", Shape: []int64{}, Data: []byte{1}},
	}, map[string]string{"k": "v\n\"\u00e9"})
	write([]WriteTensor{
		{Name: "q", DType: "F4", Shape: []int64{2, 3}, Data: make([]byte, 3)},
		{Name: "r", DType: "F6_E2M3", Shape: []int64{4}, Data: make([]byte, 3)},
		{Name: "c", DType: "C64", Shape: []int64{1}, Data: make([]byte, 8)},
	}, nil)
	for _, raw := range []struct {
		hdr  string
		data int
	}{
		{`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 16},
		{`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"dtype":"F32"}}`, 16},
		{`{"__metadata__":{"k":"1","k":"2"}}`, 0},
		{`{"__metadata__":{"k":1}}`, 0},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
		{`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0},
		{`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2},
		{`{"a":{"dtype":"F32","shape":[4],"data_offsets":[-1,1.5e1]}}`, 16},
		{`{"\ud83d\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}  `, 1},
		{`{"\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1},
		{"{}\t\r\n", 0},
		{" {}", 0},
	} {
		seeds = append(seeds, stFile(raw.hdr, raw.data))
	}
	seeds = append(seeds, stPrefix(MaxHeaderLen+1, "{}"), stPrefix(1<<40, "{}"), []byte("\x02\x00\x00"))
	return seeds
}

func FuzzReadHeader(f *testing.F) {
	for _, s := range stFuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ReadHeader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			// With an in-memory reader there is no I/O error: only format errors.
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			if !errors.Is(err, errdefs.ErrDataLoss) {
				t.Fatalf("%v does not wrap errdefs.ErrDataLoss", err)
			}
			return
		}
		if h.HeaderLen != int64(binary.LittleEndian.Uint64(data)) {
			t.Fatalf("HeaderLen %d, prefix says %d", h.HeaderLen, binary.LittleEndian.Uint64(data))
		}
		dataLen := int64(len(data)) - h.DataStart()
		var end int64
		names := make(map[string]bool)
		for _, ti := range h.Tensors {
			if ti.Begin != end {
				t.Fatalf("%q begins at %d, want %d", ti.Name, ti.Begin, end)
			}
			dt, ok := LookupDType(ti.DType)
			if !ok {
				t.Fatalf("%q has unknown dtype %q", ti.Name, ti.DType)
			}
			if n, ok := dt.TensorBytes(ti.Shape); !ok || n != ti.End-ti.Begin {
				t.Fatalf("%q: shape %v of %s, offsets [%d, %d)", ti.Name, ti.Shape, ti.DType, ti.Begin, ti.End)
			}
			if ti.Name == "" || ti.Name == "__metadata__" || names[ti.Name] {
				t.Fatalf("bad or repeated name %q", ti.Name)
			}
			names[ti.Name] = true
			end = ti.End
		}
		if end != dataLen {
			t.Fatalf("tensors end at %d, data buffer is %d bytes", end, dataLen)
		}

		// Re-encoding the result gives an equivalent, canonical, aligned file.
		hdr, err := EncodeHeader(h.Tensors, h.Metadata)
		if err != nil {
			t.Fatalf("EncodeHeader of an accepted header: %v", err)
		}
		file := append(hdr, data[h.DataStart():]...)
		h2, err := ReadHeader(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("re-encoded header rejected: %v\n%q", err, hdr)
		}
		if h2.DataStart()%8 != 0 {
			t.Fatalf("re-encoded data starts at %d", h2.DataStart())
		}
		if !reflect.DeepEqual(h2.Tensors, h.Tensors) || !reflect.DeepEqual(h2.Metadata, h.Metadata) {
			t.Fatalf("round trip changed the header:\n%+v\n%+v", h, h2)
		}
		hdr2, err := EncodeHeader(h2.Tensors, h2.Metadata)
		if err != nil || !bytes.Equal(hdr2, hdr) {
			t.Fatalf("encoding is not stable: %v\n%q\n%q", err, hdr, hdr2)
		}
	})
}
