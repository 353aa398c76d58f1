package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// IndexSchema is the version of the tensor index encoding this code
// writes: a safetensors file's BLAKE3 is its tensor tree (TreeBLAKE3).
// Schema 1, where it was the BLAKE3 of the whole file, is still read.
const IndexSchema = 2

// IndexSchemaWholeFile is the first schema: every file's BLAKE3 is of its
// whole bytes.
const IndexSchemaWholeFile = 1

// Index describes every payload file of an artifact and every tensor in it.
// It is deterministic: the same files and identity give the same bytes.
type Index struct {
	Schema int         `json:"schema"`
	ID     ID          `json:"identity"` // sha256:<hex>
	Files  []FileEntry `json:"files"`    // sorted by path
}

// File is the record of one payload file: its path in the artifact, its
// size and its digests. The store's manifest lists it, an index entry, a
// pull's plan and the peer's wire shard embed it.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex; the OCI layer digest and the Hugging Face LFS oid
	// BLAKE3 is hex: for a safetensors file in an index of schema 2 its
	// tensor tree (TreeBLAKE3), otherwise of the whole file.
	BLAKE3 string `json:"blake3"`
}

// FileEntry is one payload file as the index describes it. The embedded
// File's fields are the entry's first JSON fields.
type FileEntry struct {
	File
	// Safetensors files only: the header region [0, DataStart) and its BLAKE3.
	DataStart    int64         `json:"data_start,omitempty"`
	HeaderBLAKE3 string        `json:"header_blake3,omitempty"`
	Tensors      []TensorEntry `json:"tensors,omitempty"` // sorted by offset
}

// TensorEntry is one tensor; Offset is absolute in its file.
type TensorEntry struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Offset int64   `json:"offset"`
	Length int64   `json:"length"`
	BLAKE3 string  `json:"blake3"`
}

// IsSafetensors reports whether a payload path names a safetensors file.
func IsSafetensors(path string) bool { return strings.HasSuffix(path, ".safetensors") }

// Encode returns the index's deterministic JSON encoding.
func (x *Index) Encode() ([]byte, error) {
	raw, err := json.Marshal(x)
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	return raw, nil
}

// TotalBytes is the sum of the payload file sizes.
func (x *Index) TotalBytes() int64 {
	var n int64
	for _, f := range x.Files {
		n += f.Size
	}
	return n
}

// TensorCount is the number of tensors over all files.
func (x *Index) TensorCount() int {
	n := 0
	for _, f := range x.Files {
		n += len(f.Tensors)
	}
	return n
}

// DecodeIndex parses an index strictly: unknown fields, trailing data,
// paths that leave the artifact, digests that are not hex, and safetensors
// entries whose tensors do not tile the data region are refused; in schema 2
// a safetensors file's BLAKE3 must be the tree of its header and tensors.
func DecodeIndex(doc []byte) (*Index, error) {
	var x Index
	if err := DecodeStrictJSON(bytes.NewReader(doc), &x); err != nil {
		return nil, fmt.Errorf("decode index: %w", err)
	}
	if x.Schema != IndexSchema && x.Schema != IndexSchemaWholeFile {
		return nil, fmt.Errorf("decode index: unsupported schema %d", x.Schema)
	}
	for i, f := range x.Files {
		if err := ValidateRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("decode index: file %d: %w", i, err)
		}
		if i > 0 && x.Files[i-1].Path >= f.Path {
			return nil, fmt.Errorf("decode index: files not sorted at %q", f.Path)
		}
		if err := checkEntry(x.Schema, f); err != nil {
			return nil, fmt.Errorf("decode index: file %q: %w", f.Path, err)
		}
	}
	return &x, nil
}

// checkEntry checks one file entry of an index of the given schema.
func checkEntry(schema int, f FileEntry) error {
	if f.Size < 0 {
		return fmt.Errorf("negative size")
	}
	for _, d := range []string{f.SHA256, f.BLAKE3} {
		if _, err := ParseSum(d); err != nil {
			return err
		}
	}
	if !IsSafetensors(f.Path) {
		if f.DataStart != 0 || f.HeaderBLAKE3 != "" || len(f.Tensors) != 0 {
			return fmt.Errorf("tensors indexed in a file that is not safetensors")
		}
		return nil
	}
	if f.DataStart < 8 || f.DataStart > f.Size || f.DataStart-8 > MaxHeaderLen {
		return fmt.Errorf("bad data start %d", f.DataStart)
	}
	end := f.DataStart
	for _, t := range f.Tensors {
		if t.Offset != end || t.Length < 0 || t.Length > f.Size-t.Offset {
			return fmt.Errorf("tensor %q does not follow the previous one inside the file", t.Name)
		}
		end += t.Length
	}
	if end != f.Size {
		return fmt.Errorf("tensors end at %d, the file at %d", end, f.Size)
	}
	tree, err := EntryTree(f)
	if err != nil {
		return err
	}
	if schema >= IndexSchema && tree != f.BLAKE3 {
		return fmt.Errorf("blake3 %s is not the tree of the header and tensors (%s)", f.BLAKE3, tree)
	}
	return nil
}

// Upgrade rewrites a schema-1 index in the current schema: each safetensors
// file's BLAKE3 becomes its tensor tree, derived from the header and tensor
// BLAKE3 values the index holds, which bind the same bytes. An index already
// in the current schema is left as it is.
func (x *Index) Upgrade() error {
	if x.Schema == IndexSchema {
		return nil
	}
	for i, f := range x.Files {
		if !IsSafetensors(f.Path) {
			continue
		}
		tree, err := EntryTree(f)
		if err != nil {
			return fmt.Errorf("upgrade index: %w", err)
		}
		x.Files[i].BLAKE3 = tree
	}
	x.Schema = IndexSchema
	return nil
}

// IndexBound is the most bytes the encoded index of files with these paths
// and sizes can take: a fixed share per file, and for a safetensors file a
// multiple of its header, which it cannot exceed (each tensor's index entry
// is at most six times its header entry, name escapes included). A reader
// of an index from untrusted bytes refuses a larger one before reading it.
func IndexBound(paths []string, sizes []int64) int64 {
	n := int64(1 << 10)
	for i, p := range paths {
		n += 512 + 6*int64(len(p))
		if IsSafetensors(p) && sizes[i] > 8 {
			n += 6 * min(sizes[i]-8, MaxHeaderLen)
		}
	}
	return n
}
