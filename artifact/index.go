package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// IndexSchema is the version of the tensor index encoding.
const IndexSchema = 1

// Index describes every payload file of an artifact and every tensor in it.
// It is deterministic: the same files and identity give the same bytes.
type Index struct {
	Schema   int         `json:"schema"`
	Identity string      `json:"identity"` // the identity digest, sha256:<hex>
	Files    []FileEntry `json:"files"`    // sorted by path
}

// FileEntry is one payload file.
type FileEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex; the OCI layer digest and the Hugging Face LFS oid
	BLAKE3 string `json:"blake3"` // hex of the whole file
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

// DecodeIndex parses an index strictly: unknown fields, trailing data and
// paths that leave the artifact are refused.
func DecodeIndex(doc []byte) (*Index, error) {
	var x Index
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("decode index: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode index: trailing data")
	}
	if x.Schema != IndexSchema {
		return nil, fmt.Errorf("decode index: unsupported schema %d", x.Schema)
	}
	for i, f := range x.Files {
		if err := ValidateRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("decode index: file %d: %w", i, err)
		}
		if i > 0 && x.Files[i-1].Path >= f.Path {
			return nil, fmt.Errorf("decode index: files not sorted at %q", f.Path)
		}
		if f.Size < 0 || f.DataStart < 0 || f.DataStart > f.Size {
			return nil, fmt.Errorf("decode index: file %q: bad size or data start", f.Path)
		}
		for _, t := range f.Tensors {
			if t.Offset < f.DataStart || t.Length < 0 || t.Offset > f.Size-t.Length {
				return nil, fmt.Errorf("decode index: file %q: tensor %q outside the file", f.Path, t.Name)
			}
		}
	}
	return &x, nil
}
