package artifact

import (
	"encoding/hex"
	"fmt"

	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// Sum is a raw 32-byte hash value: a BLAKE3 sum, or a sha256 one. "Digest"
// names an OCI digest (sha256:<hex>) only.
type Sum = [32]byte

// TreeBLAKE3 is the tensor-tree digest of a safetensors file: the BLAKE3 of
// its header region's BLAKE3 followed by each tensor's BLAKE3 in offset
// order, as raw 32-byte digests. A strictly read file is tiled by its header
// region and its tensors, so the tree commits to every byte of the file
// while each tensor is hashed once, on its own, in any order.
func TreeBLAKE3(header Sum, tensors []Sum) Sum {
	h := blake3.New()
	h.Write(header[:])
	for _, t := range tensors {
		h.Write(t[:])
	}
	var sum Sum
	h.Sum(sum[:0])
	return sum
}

// EntryTree returns the tensor-tree digest (hex) of a safetensors file entry
// from its header and tensor BLAKE3 values.
func EntryTree(e FileEntry) (string, error) {
	header, err := ParseSum(e.HeaderBLAKE3)
	if err != nil {
		return "", fmt.Errorf("file %s: header_blake3: %w", e.Path, err)
	}
	tensors := make([]Sum, len(e.Tensors))
	for i, t := range e.Tensors {
		if tensors[i], err = ParseSum(t.BLAKE3); err != nil {
			return "", fmt.Errorf("file %s: tensor %q: blake3: %w", e.Path, t.Name, err)
		}
	}
	sum := TreeBLAKE3(header, tensors)
	return hex.EncodeToString(sum[:]), nil
}

// ParseSum reads a sum written as 64 lowercase hex digits.
func ParseSum(s string) (Sum, error) {
	var d Sum
	if len(s) != 64 {
		return d, fmt.Errorf("digest %q is not 64 hex digits", s)
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return d, fmt.Errorf("digest %q is not lowercase hex", s)
		}
	}
	hex.Decode(d[:], []byte(s))
	return d, nil
}

// SumHex writes a sum as lowercase hex.
func SumHex(d Sum) string { return hex.EncodeToString(d[:]) }
