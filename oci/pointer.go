package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
)

// PointerDir is the directory, relative to a weight image's target
// directory, that holds its pointer files: the pointer layer of an artifact
// mounted at /models/x holds /models/x/.weightsnap/pointers/<identity-hex>.json.
const PointerDir = ".weightsnap/pointers"

// PointerSchema is the version of the pointer file encoding.
const PointerSchema = 1

// Pointer is the content of a pointer file, and what a pointer layer's
// annotations carry: which artifact belongs at which directory.
type Pointer struct {
	Schema   int    `json:"schema"`
	Artifact string `json:"artifact"` // registry/repo@sha256:<manifest>
	Identity string `json:"identity"` // sha256:<hex>
	Target   string `json:"target"`   // absolute directory in the container
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
	// Next are the pointers (artifact and identity) of the image's later
	// pointer layers, carried in the LabelNext label so that a snapshotter
	// resolves them while containerd still prepares this layer (containerd
	// prepares an image's layers one after the other). Not in the file.
	Next []Pointer `json:"-"`
	// Mode is the image's choice when the artifact cannot be had
	// (ModeRequired, ModePreferred), carried in the LabelMode label; ""
	// leaves it to the node. It is in the file too, so images that differ
	// only in it have different layers, and never share a snapshot.
	Mode string `json:"mode,omitempty"`
}

// PointerLayer is one built pointer layer: its tar bytes and descriptor.
type PointerLayer struct {
	Pointer Pointer
	Tar     []byte
	Desc    ocispec.Descriptor // media type, digest, size, annotations
	DiffID  string             // uncompressed: the same as the digest
}

// CleanTarget validates a target directory: absolute, clean, not "/", and
// free of "." and ".." components.
func CleanTarget(target string) (string, error) {
	if !strings.HasPrefix(target, "/") {
		return "", fmt.Errorf("target %q is not absolute", target)
	}
	for _, part := range strings.Split(target, "/") {
		if part == "." || part == ".." {
			return "", fmt.Errorf("target %q has a %q component", target, part)
		}
	}
	c := path.Clean(target)
	if c == "/" {
		return "", fmt.Errorf("target %q is the root directory", target)
	}
	if err := artifact.ValidateRelPath(strings.TrimPrefix(c, "/")); err != nil {
		return "", fmt.Errorf("target %q: %w", target, err)
	}
	return c, nil
}

// PointerPath is the path, inside the image, of the pointer file of p.
func PointerPath(p Pointer) string {
	return path.Join(p.Target, PointerDir, strings.TrimPrefix(p.Identity, "sha256:")+".json")
}

// PointerFile is the content of p's pointer file: canonical JSON and a newline.
func PointerFile(p Pointer) ([]byte, error) {
	if p.Schema == 0 {
		p.Schema = PointerSchema
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	body, err := artifact.Canonicalize(raw)
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

// NewPointerLayer builds the deterministic pointer layer of p: an
// uncompressed tar of the target directory, its parents, .weightsnap/,
// .weightsnap/pointers/ and the pointer file, in sorted order, owned by
// 0:0 with mtime 0 (directories 0755, the file 0444).
func NewPointerLayer(p Pointer) (*PointerLayer, error) {
	target, err := CleanTarget(p.Target)
	if err != nil {
		return nil, err
	}
	p.Target = target
	if p.Schema == 0 {
		p.Schema = PointerSchema
	}
	// Next is a hint: leave out what would take the labels past half of
	// containerd's limit, keeping that half for the labels containerd adds.
	labels := PointerLabels(p)
	for len(p.Next) > 0 && labelBytes(labels) > maxLabelsBytes/2 {
		p.Next = p.Next[:len(p.Next)-1]
		labels = PointerLabels(p)
	}
	if _, _, err := ParsePointerLabels(labels); err != nil {
		return nil, err
	}
	body, err := PointerFile(p)
	if err != nil {
		return nil, err
	}

	file := strings.TrimPrefix(PointerPath(p), "/")
	var dirs []string
	for d := path.Dir(file); d != "."; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file, Mode: 0o444, Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	pl := &PointerLayer{Pointer: p, Tar: buf.Bytes()}
	pl.Desc = descriptorOf(MediaTypePointerLayer, pl.Tar)
	pl.Desc.Annotations = labels
	pl.DiffID = pl.Desc.Digest.String()
	if total := labelBytes(labels); total > maxLabelsBytes/2 {
		return nil, fmt.Errorf("pointer layer labels take %d bytes, too close to containerd's %d-byte limit", total, maxLabelsBytes)
	}
	return pl, nil
}
