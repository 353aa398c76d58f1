package artifact

import (
	"fmt"
	"io"
	"slices"

	"github.com/containerd/errdefs"
)

// Every digest the store records is computed from the bytes written, or
// bound to them through one that was. A Binding says which: what the writer
// computes, and the record (Want) whose other digests that computation
// binds to the bytes.
//
//   - BindNone: the writer computes everything, sha256 and the tensor tree
//     (an import, a pull of a foreign artifact). Want gives path and size.
//   - BindTreeStream: a registry pull of a weightsnap artifact, whose
//     manifest (its digest, or a signature over it) is what the pull trusts:
//     it pins the index layer, and so the index's tensor tree, as firmly as
//     the layers' sha256 values. The writer hashes the bytes written in order
//     with BLAKE3 alone (about half sha256's CPU per byte): the header region
//     (its BLAKE3 and tensor table) and every tensor, each checked against
//     Want as it ends, so a build can serve the tensors it verified before
//     the whole file (chain seeding; FileHasher.Checked); the file's tree
//     must equal Want.BLAKE3, and Want.SHA256 is recorded, bound by that
//     tree, as a peer fetch's is. A file that is not safetensors is hashed
//     whole, checked at the end.
//   - BindTree: a peer fetch. The bytes land in any order (WriteAt, several
//     connections); the producer hashes each tensor as its bytes land and
//     reports the BLAKE3 (BoundFileWriter.SetPartBLAKE3). The writer keeps
//     the header bytes as they are written, parses and hashes them, derives
//     the tensor tree, which must equal Want.BLAKE3 (the sender's record),
//     and records the sender's sha256, which that tree binds only as far
//     as the sender is trusted. The file is never read back, save with
//     CheckSHA256.
type Binding struct {
	// Want is the record: path and size, and for the other bindings
	// every digest and the tensor table, in the current index schema
	// (Index.Upgrade).
	Want FileEntry
	By   BindBy
	// CheckSHA256 (BindTree only) also computes the file's sha256 and
	// checks it against Want's: a peer fetch whose trust rests on sha256
	// values (a signature record kept with the artifact binds its files by
	// sha256, not by the sender's tree) reads each file back once it is
	// whole.
	CheckSHA256 bool
}

// BindBy is the digest a Binding computes from the bytes.
type BindBy int

// The bindings.
const (
	BindNone BindBy = iota
	BindTree
	BindTreeStream
)

// ChecksTensors says whether the writer checks each tensor of a
// safetensors file against Want as the tensor ends, so that the verified
// prefix grows tensor by tensor (FileHasher.Checked).
func (b Binding) ChecksTensors() bool {
	return IsSafetensors(b.Want.Path) && b.By == BindTreeStream
}

// BoundFileWriter writes one bound file. Write appends in order; WriteAt
// (BindTree only) places bytes anywhere and may be called from several
// goroutines at once. Close comes after every write has returned.
type BoundFileWriter interface {
	FileWriter
	io.WriterAt
	// SetPartBLAKE3 reports, for BindTree, the BLAKE3 of part i of the file,
	// which the producer computed from the bytes it wrote there: tensor i
	// (in offset order) of a safetensors file, or part 0, the whole of any
	// other file. It may be called from several goroutines at once.
	SetPartBLAKE3(i int, sum Sum) error
	// Map hands out a BindTree file as a shared writable mapping, for
	// transports that write into memory: one-sided RDMA reads land there.
	// Bytes written through it count as positioned writes; it is valid
	// until Close. Any other file refuses it.
	Map() ([]byte, error)
}

// Parts is the number of parts of a BindTree file (see SetPartBLAKE3).
func (e FileEntry) Parts() int {
	if IsSafetensors(e.Path) {
		return len(e.Tensors)
	}
	return 1
}

// checkBinding checks that a binding's record can bind a file at all.
func checkBinding(b Binding) error {
	if err := ValidateRelPath(b.Want.Path); err != nil {
		return err
	}
	if b.CheckSHA256 && b.By != BindTree {
		return fmt.Errorf("binding of %s: a sha256 check is for a file bound by its tree out of order: %w", b.Want.Path, errdefs.ErrInvalidArgument)
	}
	switch b.By {
	case BindNone:
		return nil
	case BindTree, BindTreeStream:
		if err := checkEntry(IndexSchema, b.Want); err != nil {
			return fmt.Errorf("binding of %s: %w: %w", b.Want.Path, err, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	return fmt.Errorf("binding of %s: unknown kind %d: %w", b.Want.Path, b.By, errdefs.ErrInvalidArgument)
}

// EntryMismatchError says that bytes disagree with the record they were
// bound to, or a computed entry with the one it was checked against.
type EntryMismatchError struct {
	Path   string
	Tensor string // "" for the file as a whole
	Field  string
	Want   string // from the record
	Got    string // from the bytes
}

func (e *EntryMismatchError) Error() string {
	s := "file " + e.Path
	if e.Tensor != "" {
		s += ": tensor " + e.Tensor
	}
	return fmt.Sprintf("%s: %s: the record says %q, the bytes give %q", s, e.Field, e.Want, e.Got)
}

// Unwrap classifies the error.
func (e *EntryMismatchError) Unwrap() error { return errdefs.ErrDataLoss }

// CompareEntry checks an entry computed from bytes against the record of
// the same file: every field, every tensor.
func CompareEntry(want, got FileEntry) error {
	mis := func(field, w, g string) error {
		return &EntryMismatchError{Path: want.Path, Field: field, Want: w, Got: g}
	}
	switch {
	case want.SHA256 != got.SHA256:
		return mis("sha256", want.SHA256, got.SHA256)
	case want.HeaderBLAKE3 != got.HeaderBLAKE3:
		return mis("header_blake3", want.HeaderBLAKE3, got.HeaderBLAKE3)
	}
	if err := compareTable(want, got); err != nil {
		return err
	}
	for i, w := range want.Tensors {
		if g := got.Tensors[i]; w.BLAKE3 != g.BLAKE3 {
			return &EntryMismatchError{Path: want.Path, Tensor: w.Name, Field: "blake3", Want: w.BLAKE3, Got: g.BLAKE3}
		}
	}
	if want.BLAKE3 != got.BLAKE3 {
		return mis("blake3", want.BLAKE3, got.BLAKE3)
	}
	return nil
}

// compareTable checks path, size, data start and the tensor table (names,
// dtypes, shapes, offsets), not the digests.
func compareTable(want, got FileEntry) error {
	mis := func(field, w, g string) error {
		return &EntryMismatchError{Path: want.Path, Field: field, Want: w, Got: g}
	}
	switch {
	case want.Path != got.Path:
		return mis("path", want.Path, got.Path)
	case want.Size != got.Size:
		return mis("size", fmt.Sprint(want.Size), fmt.Sprint(got.Size))
	case want.DataStart != got.DataStart:
		return mis("data_start", fmt.Sprint(want.DataStart), fmt.Sprint(got.DataStart))
	case len(want.Tensors) != len(got.Tensors):
		return mis("tensor count", fmt.Sprint(len(want.Tensors)), fmt.Sprint(len(got.Tensors)))
	}
	for i, w := range want.Tensors {
		g := got.Tensors[i]
		tmis := func(field, a, b string) error {
			return &EntryMismatchError{Path: want.Path, Tensor: w.Name, Field: field, Want: a, Got: b}
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
		}
	}
	return nil
}
