package artifact

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzFileHasher fuzzes the streaming hasher as the store uses it: the same
// bytes written in pieces cut at random points must give the same entry as
// one write, and ReadHeader's verdict: the same error, or an entry whose
// table is the header's and whose digests are of the right byte ranges.
func FuzzFileHasher(f *testing.F) {
	for _, s := range stFuzzSeeds(f) {
		f.Add(s, []byte{0, 7, 1, 200})
	}
	f.Add(stPrefix(1<<64-1, "{}"), []byte{3})
	f.Add(stPrefix(1<<63, "{}"), []byte{8})
	f.Add(stPrefix(0, "{}xxxxxx"), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		size := int64(len(data))
		whole := hashPieces(t, data, nil)
		cut := hashPieces(t, data, cuts)
		hdr, rerr := ReadHeader(bytes.NewReader(data), size)
		for _, r := range []hashResult{whole, cut} {
			if rerr != nil {
				var fe *FormatError
				if !errors.As(r.err, &fe) || fe.Error() != rerr.Error() {
					t.Fatalf("hasher: %v; ReadHeader: %v", r.err, rerr)
				}
				continue
			}
			if r.err != nil {
				t.Fatalf("hasher refused a file ReadHeader accepts: %v", r.err)
			}
			e := r.entry
			if e.DataStart != hdr.DataStart() || e.HeaderBLAKE3 != BLAKE3Hex(data[:hdr.DataStart()]) || len(e.Tensors) != len(hdr.Tensors) {
				t.Fatalf("entry %+v does not describe the header", e)
			}
			for i, ti := range hdr.Tensors {
				te := e.Tensors[i]
				if te.Name != ti.Name || te.Offset != hdr.DataStart()+ti.Begin || te.BLAKE3 != BLAKE3Hex(data[te.Offset:te.Offset+te.Length]) {
					t.Fatalf("tensor %d: %+v, header %+v", i, te, ti)
				}
			}
			if tree, err := EntryTree(e); err != nil || tree != e.BLAKE3 {
				t.Fatalf("file BLAKE3 %s is not the tree %s (%v)", e.BLAKE3, tree, err)
			}
		}
		if rerr == nil && (whole.entry.SHA256 != cut.entry.SHA256 || whole.entry.BLAKE3 != cut.entry.BLAKE3) {
			t.Fatalf("pieces %v gave another entry", cuts)
		}
	})
}

type hashResult struct {
	entry FileEntry
	err   error
}

// hashPieces writes data to a hasher in pieces of cuts[i]+1 bytes (the
// rest in one piece once the cuts run out) and returns the result.
func hashPieces(t *testing.T, data, cuts []byte) hashResult {
	h, err := NewFileHasher(Binding{Want: FileEntry{File: File{Path: "f.safetensors", Size: int64(len(data))}}})
	if err != nil {
		t.Fatal(err)
	}
	rest := data
	for len(rest) > 0 {
		n := len(rest)
		if len(cuts) > 0 {
			n, cuts = min(int(cuts[0])+1, n), cuts[1:]
		}
		if _, err := h.Write(rest[:n]); err != nil {
			h.Abort()
			return hashResult{err: err}
		}
		rest = rest[n:]
	}
	e, err := h.Sum()
	return hashResult{e, err}
}
