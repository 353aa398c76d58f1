package oci

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/pointer"
)

// PointerLayer is one built pointer layer: its tar bytes and descriptor.
type PointerLayer struct {
	Pointer pointer.Pointer
	Tar     []byte
	Desc    ocispec.Descriptor // media type, digest, size, annotations
	DiffID  string             // uncompressed: the same as the digest
}

// NewPointerLayer builds the pointer layer of p, the same bytes for the same pointer. It is an
// uncompressed tar of the target directory, its parents, .weightsnap/ and .weightsnap/pointers/. It
// holds the pointer file and the notice file, pointer.NoticeName. The notice is what a container
// run without weightsnap finds. Entries are in sorted order, owned by 0:0, with mtime 0,
// directories 0755 and files 0444.
func NewPointerLayer(p pointer.Pointer) (*PointerLayer, error) {
	target, err := pointer.CleanTarget(p.Target)
	if err != nil {
		return nil, err
	}
	p.Target = target
	if p.Schema == 0 {
		p.Schema = pointer.Schema
	}
	// Next is a hint: leave out what would take the labels past half of
	// containerd's limit, keeping that half for the labels containerd adds.
	labels := pointer.Labels(p)
	for len(p.Next) > 0 && pointer.LabelBytes(labels) > pointer.MaxLabelsBytes/2 {
		p.Next = p.Next[:len(p.Next)-1]
		labels = pointer.Labels(p)
	}
	if _, _, err := pointer.ParseLabels(labels); err != nil {
		return nil, err
	}
	body, err := pointer.File(p)
	if err != nil {
		return nil, err
	}

	file := strings.TrimPrefix(pointer.Path(p), "/")
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
	// The notice sorts after .weightsnap/: the entries stay in sorted order.
	notice := pointer.Notice(p)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(pointer.NoticePath(p), "/"), Mode: 0o444, Size: int64(len(notice)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(notice); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	pl := &PointerLayer{Pointer: p, Tar: buf.Bytes()}
	pl.Desc = descriptorOf(MediaTypePointerLayer, pl.Tar)
	pl.Desc.Annotations = labels
	pl.DiffID = pl.Desc.Digest.String()
	if total := pointer.LabelBytes(labels); total > pointer.MaxLabelsBytes/2 {
		return nil, fmt.Errorf("pointer layer labels take %d bytes, too close to containerd's %d-byte limit", total, pointer.MaxLabelsBytes)
	}
	return pl, nil
}

// PointerFromAnnotations reads the pointer a layer descriptor's annotations carry
// (pointer.ParseLabels). ok is false for an ordinary layer.
func PointerFromAnnotations(desc ocispec.Descriptor) (p pointer.Pointer, ok bool, err error) {
	return pointer.ParseLabels(desc.Annotations)
}

// weightImageError refuses to pull a weight image as if it were an
// artifact: its weights are the artifacts its pointer layers name, and the
// error names each, with the command that pulls it. nil when m has no
// pointer layer.
func weightImageError(ref string, m *ocispec.Manifest) error {
	var named []string
	for _, l := range m.Layers {
		p, ok, err := PointerFromAnnotations(l)
		switch {
		case err != nil:
			named = append(named, fmt.Sprintf("a pointer layer %s that does not parse (%v)", l.Digest, err))
		case ok:
			named = append(named, fmt.Sprintf("%s at %s (weightsnap pull %s)", p.Artifact, p.Target, p.Artifact))
		}
	}
	if len(named) == 0 {
		return nil
	}
	return fmt.Errorf("%s is a weight image, not an artifact: its weights are %s; `weightsnap inspect %s` describes it, and its containers get the weights through weightsnapd: %w",
		ref, strings.Join(named, "; "), ref, errdefs.ErrInvalidArgument)
}
