package artifact

import (
	"bytes"
	"errors"
	"testing"
)

func TestFileHasherMatchesIndexOfWrittenFile(t *testing.T) {
	var buf bytes.Buffer
	_, err := WriteSafetensors(&buf, []WriteTensor{
		{Name: "a", DType: "U8", Shape: []int64{3}, Data: []byte{1, 2, 3}},
		{Name: "empty", DType: "F32", Shape: []int64{0}, Data: nil},
		{Name: "b", DType: "F16", Shape: []int64{2, 2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	// Any split of the writes gives the same entry.
	var first FileEntry
	for _, step := range []int{1, 3, 8, 64, len(data)} {
		h, err := NewFileHasher(Binding{Want: FileEntry{File: File{Path: "m.safetensors", Size: int64(len(data))}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(data); i += step {
			if _, err := h.Write(data[i:min(i+step, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		e, err := h.Sum()
		if err != nil {
			t.Fatal(err)
		}
		if step == 1 {
			first = e
			hdr, _ := ReadHeader(bytes.NewReader(data), int64(len(data)))
			if e.DataStart != hdr.DataStart() || len(e.Tensors) != 3 || e.BLAKE3 != treeOf(t, data) ||
				e.HeaderBLAKE3 != BLAKE3Hex(data[:hdr.DataStart()]) {
				t.Fatalf("entry %+v does not describe the file", e)
			}
			for _, te := range e.Tensors {
				if te.BLAKE3 != BLAKE3Hex(data[te.Offset:te.Offset+te.Length]) {
					t.Fatalf("tensor %s: wrong BLAKE3", te.Name)
				}
			}
			continue
		}
		if e.BLAKE3 != first.BLAKE3 || e.SHA256 != first.SHA256 || e.Tensors[2].BLAKE3 != first.Tensors[2].BLAKE3 {
			t.Fatalf("writes of %d bytes gave another entry", step)
		}
	}
}

func TestFileHasherRefusesBadHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"zero length prefix", make([]byte, 64)},
		{"length past the end", append([]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0}, make([]byte, 8)...)},
		{"not JSON", append([]byte{8, 0, 0, 0, 0, 0, 0, 0}, []byte("xxxxxxxx")...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewFileHasher(Binding{Want: FileEntry{File: File{Path: "bad.safetensors", Size: int64(len(tc.data))}}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Write(tc.data)
			if err == nil {
				_, err = h.Sum()
			} else {
				h.Abort()
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FormatError", err)
			}
		})
	}
}

// A BindTreeStream file reports each tensor checked as it ends, and
// refuses a tensor whose bytes differ from the record when that tensor
// ends, before the rest of the file; a BindNone file checks nothing.
func TestFileHasherChecksTensorsAsTheyEnd(t *testing.T) {
	var buf bytes.Buffer
	if _, err := WriteSafetensors(&buf, []WriteTensor{
		{Name: "a", DType: "U8", Shape: []int64{4}, Data: []byte{1, 2, 3, 4}},
		{Name: "b", DType: "U8", Shape: []int64{4}, Data: []byte{5, 6, 7, 8}},
	}, nil); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	whole, err := NewFileHasher(Binding{Want: FileEntry{File: File{Path: "m.safetensors", Size: int64(len(data))}}})
	if err != nil {
		t.Fatal(err)
	}
	whole.Write(data)
	want, err := whole.Sum()
	if err != nil {
		t.Fatal(err)
	}
	a := want.Tensors[0]
	for _, tc := range []struct {
		name      string
		flip      int64 // a byte flipped, -1 for none
		by        BindBy
		checkedAt map[int64]int64 // bytes written -> Checked()
		failAt    int64           // bytes written when Write fails, 0 for none
	}{
		{"checked", -1, BindTreeStream, map[int64]int64{want.DataStart - 1: 0, want.DataStart: want.DataStart, a.Offset + a.Length - 1: want.DataStart,
			a.Offset + a.Length: a.Offset + a.Length, want.Size: want.Size}, 0},
		{"first tensor wrong", a.Offset, BindTreeStream, map[int64]int64{a.Offset + a.Length - 1: want.DataStart}, a.Offset + a.Length},
		{"not bound", -1, BindNone, map[int64]int64{want.DataStart: 0, want.Size: 0}, 0},
		{"changed but not bound", a.Offset, BindNone, map[int64]int64{want.Size: 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(data)
			if tc.flip >= 0 {
				bad[tc.flip] ^= 0xff
			}
			h, err := NewFileHasher(Binding{Want: want, By: tc.by})
			if err != nil {
				t.Fatal(err)
			}
			for i := range bad {
				_, err := h.Write(bad[i : i+1])
				n := int64(i + 1)
				if n == tc.failAt {
					var mm *EntryMismatchError
					if !errors.As(err, &mm) || mm.Tensor != "a" {
						t.Fatalf("byte %d: %v, want a mismatch of tensor a", n, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("byte %d: %v", n, err)
				}
				if c, ok := tc.checkedAt[n]; ok && h.Checked() != c {
					t.Fatalf("after %d bytes Checked() = %d, want %d", n, h.Checked(), c)
				}
			}
			if tc.failAt != 0 {
				t.Fatal("no mismatch")
			}
			if _, err := h.Sum(); err != nil {
				t.Fatalf("Sum: %v", err)
			}
		})
	}
}
