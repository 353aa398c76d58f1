package artifact

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/zeebo/blake3"
)

// goldenEntry is the computed entry of testdata/tree-golden.safetensors.
func goldenEntry(t *testing.T) ([]byte, FileEntry) {
	t.Helper()
	data, err := os.ReadFile("testdata/tree-golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	e, err := HashFile(bytes.NewReader(data), Binding{Want: FileEntry{File: File{Path: "m.safetensors", Size: int64(len(data))}}})
	if err != nil {
		t.Fatal(err)
	}
	return data, e
}

func withTensorBLAKE3(e FileEntry, i int, sum string) FileEntry {
	e.Tensors = append([]TensorEntry(nil), e.Tensors...)
	e.Tensors[i].BLAKE3 = sum
	e.BLAKE3, _ = EntryTree(e)
	return e
}

func TestCompareEntryNamesTheTensor(t *testing.T) {
	_, e := goldenEntry(t)
	if err := CompareEntry(e, e); err != nil {
		t.Fatal(err)
	}
	bad := withTensorBLAKE3(e, 2, strings.Repeat("0", 64))
	err := CompareEntry(bad, e)
	var em *EntryMismatchError
	if !errors.As(err, &em) || em.Tensor != e.Tensors[2].Name || em.Field != "blake3" || !errdefs.IsDataLoss(err) {
		t.Fatalf("%v", err)
	}
	bad = e
	bad.HeaderBLAKE3 = strings.Repeat("1", 64)
	if !errors.As(CompareEntry(bad, e), &em) || em.Field != "header_blake3" {
		t.Fatal("header mismatch not seen")
	}
}

// TestBindTreeStreamChecksTheRecord: under BindTreeStream every tensor
// and the tree are checked against the record, whose sha256 is recorded
// as the tree binds it (not computed).
func TestBindTreeStreamChecksTheRecord(t *testing.T) {
	data, e := goldenEntry(t)
	otherSHA := e
	otherSHA.SHA256 = strings.Repeat("b", 64)
	for _, tc := range []struct {
		name   string
		want   FileEntry
		field  string // "" when the file binds
		tensor string
	}{
		{"the publisher's record", e, "", ""},
		{"a record lying about a tensor, consistently", withTensorBLAKE3(e, 3, strings.Repeat("a", 64)), "blake3", e.Tensors[3].Name},
		{"a record naming another sha256", otherSHA, "", ""},
		{"another header", func() FileEntry {
			x := e
			x.HeaderBLAKE3 = strings.Repeat("c", 64)
			x.BLAKE3, _ = EntryTree(x)
			return x
		}(), "header_blake3", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HashFile(bytes.NewReader(data), Binding{Want: tc.want, By: BindTreeStream})
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if CompareEntry(tc.want, got) != nil || got.SHA256 != tc.want.SHA256 {
					t.Fatalf("recorded %+v, want the record %+v", got, tc.want)
				}
				return
			}
			var em *EntryMismatchError
			if !errors.As(err, &em) || em.Field != tc.field || em.Tensor != tc.tensor || !errdefs.IsDataLoss(err) {
				t.Fatalf("got %v, want a %s mismatch of tensor %q", err, tc.field, tc.tensor)
			}
		})
	}
}

// TestCheckSHA256: a BindTree binding with CheckSHA256 computes the sha256
// too and refuses a record whose sha256 the bytes do not give; no other
// binding takes the flag.
func TestCheckSHA256(t *testing.T) {
	data, e := goldenEntry(t)
	otherSHA := e
	otherSHA.SHA256 = strings.Repeat("b", 64)
	for _, tc := range []struct {
		name  string
		b     Binding
		field string // "" when the file binds
		inval bool   // the binding itself is refused
	}{
		{"the true sha256", Binding{Want: e, By: BindTree, CheckSHA256: true}, "", false},
		{"another sha256", Binding{Want: otherSHA, By: BindTree, CheckSHA256: true}, "sha256", false},
		{"another sha256, not checked", Binding{Want: otherSHA, By: BindTree}, "", false},
		{"BindTreeStream", Binding{Want: e, By: BindTreeStream, CheckSHA256: true}, "", true},
		{"BindNone", Binding{Want: FileEntry{File: e.File}, CheckSHA256: true}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HashFile(bytes.NewReader(data), tc.b)
			var em *EntryMismatchError
			switch {
			case tc.inval:
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("got %v, want the binding refused", err)
				}
			case tc.field != "":
				if !errors.As(err, &em) || em.Field != tc.field || em.Got != e.SHA256 || !errdefs.IsDataLoss(err) {
					t.Fatalf("got %v, want a %s mismatch", err, tc.field)
				}
			case err != nil || got.SHA256 != tc.b.Want.SHA256:
				t.Fatalf("got %+v %v, want the record's sha256", got, err)
			}
		})
	}
}

// TestFinishTree: a file written out of order is bound by the tree of the
// parts the producer reports, and the sender's sha256 recorded.
func TestFinishTree(t *testing.T) {
	data, e := goldenEntry(t)
	parts := func() []Sum {
		p := make([]Sum, len(e.Tensors))
		for i, te := range e.Tensors {
			p[i] = blake3.Sum256(data[te.Offset : te.Offset+te.Length])
		}
		return p
	}
	header := data[:e.DataStart]
	got, err := FinishTree(e, header, parts())
	if err != nil || CompareEntry(e, got) != nil {
		t.Fatalf("FinishTree: %+v, %v", got, err)
	}
	var em *EntryMismatchError
	p := parts()
	p[1][0] ^= 1
	if _, err := FinishTree(e, header, p); !errors.As(err, &em) || em.Tensor != e.Tensors[1].Name {
		t.Fatalf("a wrong tensor: %v", err)
	}
	p = parts()
	p[0] = Sum{}
	if _, err := FinishTree(e, header, p); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("a part never reported: %v", err)
	}
	bad := bytes.Clone(header)
	bad[len(bad)-1] = '!'
	if _, err := FinishTree(e, bad, parts()); err == nil {
		t.Fatal("a changed header was bound")
	}
	cfg := []byte(`{"a":1}`)
	c := FileEntry{File: File{Path: "config.json", Size: int64(len(cfg)), SHA256: strings.Repeat("d", 64), BLAKE3: BLAKE3Hex(cfg)}}
	if got, err := FinishTree(c, nil, []Sum{blake3.Sum256(cfg)}); err != nil || got.SHA256 != c.SHA256 {
		t.Fatalf("a whole file: %+v, %v", got, err)
	}
}
