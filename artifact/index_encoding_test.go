package artifact

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
)

// indexEncoding is the encoding of pinnedIndex as index.json holds it
// (docs/formats.md); the Go types may change, these bytes may not.
const indexEncoding = `{"schema":2,"identity":"sha256:` + "1111111111111111111111111111111111111111111111111111111111111111" + `","files":[` +
	`{"path":"a.safetensors","size":24,"sha256":"2222222222222222222222222222222222222222222222222222222222222222","blake3":"3333333333333333333333333333333333333333333333333333333333333333",` +
	`"data_start":16,"header_blake3":"4444444444444444444444444444444444444444444444444444444444444444",` +
	`"tensors":[{"name":"w","dtype":"BF16","shape":[2,2],"offset":16,"length":8,"blake3":"5555555555555555555555555555555555555555555555555555555555555555"}]},` +
	`{"path":"config.json","size":2,"sha256":"6666666666666666666666666666666666666666666666666666666666666666","blake3":"7777777777777777777777777777777777777777777777777777777777777777"}]}`

func pinnedIndex() *Index {
	hex := func(c byte) string { return string(bytes.Repeat([]byte{c}, 64)) }
	x := &Index{Schema: IndexSchema, ID: MustParseID("sha256:" + hex('1'))}
	x.Files = slices.Grow(x.Files, 2)[:2]
	st := &x.Files[0]
	st.Path, st.Size, st.SHA256, st.BLAKE3 = "a.safetensors", 24, hex('2'), hex('3')
	st.DataStart, st.HeaderBLAKE3 = 16, hex('4')
	st.Tensors = []TensorEntry{{Name: "w", DType: "BF16", Shape: []int64{2, 2}, Offset: 16, Length: 8, BLAKE3: hex('5')}}
	cfg := &x.Files[1]
	cfg.Path, cfg.Size, cfg.SHA256, cfg.BLAKE3 = "config.json", 2, hex('6'), hex('7')
	return x
}

func TestIndexFileEntryEncoding(t *testing.T) {
	x := pinnedIndex()
	raw, err := x.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != indexEncoding {
		t.Fatalf("index encoding changed:\n got %s\nwant %s", raw, indexEncoding)
	}
	var back Index
	if err := DecodeStrictJSON(bytes.NewReader(raw), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, x) {
		t.Fatalf("decoded %+v, want %+v", back, *x)
	}
}
