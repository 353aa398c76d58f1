package artifact

import (
	"fmt"
	"slices"
)

// EntryMismatch is the first field in which two entries of the same file
// differ: one computed from bytes, one from a manifest or index.
type EntryMismatch struct {
	Path   string
	Tensor string // the tensor concerned, if any
	Field  string
	Want   string
	Got    string
}

func (e *EntryMismatch) Error() string {
	s := "file " + e.Path
	if e.Tensor != "" {
		s += ": tensor " + e.Tensor
	}
	return fmt.Sprintf("%s: %s: want %q, got %q", s, e.Field, e.Want, e.Got)
}

// CompareEntry returns an *EntryMismatch naming the first field in which got
// differs from want, or nil when they are the same entry.
func CompareEntry(want, got FileEntry) error {
	mis := func(field, w, g string) error {
		return &EntryMismatch{Path: want.Path, Field: field, Want: w, Got: g}
	}
	switch {
	case want.Path != got.Path:
		return mis("path", want.Path, got.Path)
	case want.Size != got.Size:
		return mis("size", fmt.Sprint(want.Size), fmt.Sprint(got.Size))
	case want.SHA256 != got.SHA256:
		return mis("sha256", want.SHA256, got.SHA256)
	case want.BLAKE3 != got.BLAKE3:
		return mis("blake3", want.BLAKE3, got.BLAKE3)
	case want.DataStart != got.DataStart:
		return mis("data_start", fmt.Sprint(want.DataStart), fmt.Sprint(got.DataStart))
	case want.HeaderBLAKE3 != got.HeaderBLAKE3:
		return mis("header_blake3", want.HeaderBLAKE3, got.HeaderBLAKE3)
	case len(want.Tensors) != len(got.Tensors):
		return mis("tensor count", fmt.Sprint(len(want.Tensors)), fmt.Sprint(len(got.Tensors)))
	}
	for i, w := range want.Tensors {
		g := got.Tensors[i]
		tmis := func(field, a, b string) error {
			return &EntryMismatch{Path: want.Path, Tensor: w.Name, Field: field, Want: a, Got: b}
		}
		switch {
		case w.Name != g.Name:
			return tmis("name", w.Name, g.Name)
		case w.DType != g.DType:
			return tmis("dtype", w.DType, g.DType)
		case !slices.Equal(w.Shape, g.Shape):
			return tmis("shape", fmt.Sprint(w.Shape), fmt.Sprint(g.Shape))
		case w.Offset != g.Offset || w.Length != g.Length:
			return tmis("offsets", fmt.Sprint(w.Offset, "+", w.Length), fmt.Sprint(g.Offset, "+", g.Length))
		case w.BLAKE3 != g.BLAKE3:
			return tmis("blake3", w.BLAKE3, g.BLAKE3)
		}
	}
	return nil
}
