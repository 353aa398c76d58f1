package oci

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
)

// RemoteInfo describes a remote artifact or weight image, read from its manifest and small blobs.
// No weight blob is fetched for it.
type RemoteInfo struct {
	Ref          string             `json:"ref"`
	Manifest     string             `json:"manifest"`
	MediaType    string             `json:"media_type"`
	ArtifactType string             `json:"artifact_type,omitempty"`
	Kind         string             `json:"kind"` // weightsnap-artifact, foreign-artifact, weight-image, image
	ID           artifact.ID        `json:"identity_digest,omitzero"`
	Identity     *artifact.Identity `json:"identity,omitempty"`
	Files        []RemoteFile       `json:"files,omitempty"`
	TotalBytes   int64              `json:"total_bytes"`
	TensorCount  int                `json:"tensor_count"`
	Layers       int                `json:"layers"`
	Pointers     []RemotePointer    `json:"pointers,omitempty"`
	Error        string             `json:"error,omitempty"`
}

// RemoteFile is one payload file of a remote artifact.
type RemoteFile struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	MediaType string `json:"media_type"`
	Tensors   int    `json:"tensors"` // -1 when unknown (an artifact weightsnap did not write)
}

// RemotePointer is one pointer layer of a weight image and the artifact it names.
type RemotePointer struct {
	pointer.Pointer
	Layer string      `json:"layer"`
	Info  *RemoteInfo `json:"artifact_info,omitempty"`
}

// InspectOptions say how far InspectRemote may go.
type InspectOptions struct {
	// Platform is picked from a multi-platform image; "" means HostPlatform.
	Platform string
	// Registries are the hosts a weight image's pointers may lead to, besides the reference's own.
	// A pointer to any other host is reported, not followed.
	Registries []string
}

// InspectRemote describes the artifact or weight image at the remote's reference. It follows a
// weight image's pointers one step, to artifacts only, never into another weight image. It follows
// them only to the reference's own host or one of o.Registries.
func InspectRemote(ctx context.Context, r *registry.Remote, o InspectOptions) (*RemoteInfo, error) {
	info, m, err := inspectArtifact(ctx, r, o.Platform)
	if err != nil || info.Kind != "" {
		return info, err
	}
	var pointers []RemotePointer
	var bad []string
	for _, l := range m.Layers {
		p, ok, err := PointerFromAnnotations(l)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("layer %s: %v", l.Digest, err))
		case ok:
			pointers = append(pointers, RemotePointer{Pointer: p, Layer: l.Digest.String()})
		}
	}
	if len(pointers) > 0 || len(bad) > 0 {
		info.Kind = "weight-image"
		info.Error = strings.Join(bad, "; ")
		allowed := append([]string{r.Ref.Registry}, o.Registries...)
		for i := range pointers {
			p := &pointers[i]
			p.Info, err = inspectPointer(ctx, r, p.Pointer, allowed, o.Platform)
			if err != nil {
				p.Info = &RemoteInfo{Ref: p.Artifact, Error: err.Error()}
				continue
			}
			p.Files, p.Bytes = len(p.Info.Files), p.Info.TotalBytes
			info.TotalBytes += p.Info.TotalBytes
			info.TensorCount += p.Info.TensorCount
		}
		info.Pointers = pointers
		return info, nil
	}
	info.Kind = "image"
	info.describeLayers(ctx, r, m)
	return info, nil
}

// inspectPointer describes the artifact a pointer names: on an allowed host,
// and an artifact, not an image.
func inspectPointer(ctx context.Context, r *registry.Remote, p pointer.Pointer, allowed []string, platform string) (*RemoteInfo, error) {
	host := pointer.Host(p)
	if !AllowedHost(allowed, host) {
		return nil, fmt.Errorf("not followed: %s is not a configured registry (%s): %w", host, strings.Join(allowed, ", "), errdefs.ErrPermissionDenied)
	}
	ar, err := r.Sibling(p.Artifact)
	if err != nil {
		return nil, err
	}
	info, m, err := inspectArtifact(ctx, ar, platform)
	if err != nil {
		return nil, err
	}
	if info.Kind == "" && !slices.ContainsFunc(m.Layers, func(l ocispec.Descriptor) bool { return pointer.IsWeightLayer(l.Annotations) }) {
		info.describeLayers(ctx, ar, m)
	}
	if info.Kind != "weightsnap-artifact" && info.Kind != "foreign-artifact" {
		return nil, fmt.Errorf("not followed: %s is an image, not a weight artifact: %w", p.Artifact, errdefs.ErrInvalidArgument)
	}
	return info, nil
}

// inspectArtifact reads the manifest at the remote's reference and, for a
// weightsnap artifact, its index layer; Kind stays "" for anything else,
// whose manifest it returns.
func inspectArtifact(ctx context.Context, r *registry.Remote, platform string) (*RemoteInfo, *ocispec.Manifest, error) {
	res, err := resolveManifest(ctx, r, platform)
	if err != nil {
		return nil, nil, err
	}
	m := res.Manifest
	info := &RemoteInfo{Ref: r.String(), Manifest: res.Desc.Digest.String(), MediaType: m.MediaType,
		ArtifactType: m.ArtifactType, Layers: len(m.Layers)}
	if info.ArtifactType == "" {
		info.ArtifactType = m.Config.MediaType
		if info.ArtifactType == "application/vnd.oci.image.config.v1+json" || info.ArtifactType == dockerConfig {
			info.ArtifactType = ""
		}
	}
	if _, ok := IndexLayer(m); !ok {
		return info, m, nil
	}
	plan, err := planRemote(ctx, r, m, ImportOptions{})
	if err != nil {
		return nil, nil, err
	}
	info.Kind = "weightsnap-artifact"
	id := plan.Identity
	info.Identity = &id
	if info.ID, err = id.ID(); err != nil {
		return nil, nil, err
	}
	for i, f := range plan.Index.Files {
		info.Files = append(info.Files, RemoteFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256,
			MediaType: plan.Files[i].Layer.MediaType, Tensors: len(f.Tensors)})
	}
	info.TotalBytes, info.TensorCount = plan.Index.TotalBytes(), plan.Index.TensorCount()
	return info, m, nil
}

// describeLayers fills in an image or a foreign artifact: its file layers,
// or, for an image, its size.
func (info *RemoteInfo) describeLayers(ctx context.Context, r *registry.Remote, m *ocispec.Manifest) {
	info.Kind = "image"
	for _, l := range m.Layers {
		if ClassifyLayer(l) != LayerFile {
			continue
		}
		info.Kind = "foreign-artifact"
		f := RemoteFile{Path: LayerPath(l), Size: l.Size, SHA256: l.Digest.Encoded(), MediaType: l.MediaType, Tensors: -1}
		if artifact.IsSafetensors(f.Path) {
			if n, ok := remoteTensorCount(ctx, r, l); ok {
				f.Tensors = n
				info.TensorCount += n
			}
		}
		info.Files = append(info.Files, f)
		info.TotalBytes += l.Size
	}
	if info.Kind == "image" {
		for _, l := range m.Layers {
			info.TotalBytes += l.Size
		}
	}
}

// String is a short summary, for logs.
func (i *RemoteInfo) String() string {
	return fmt.Sprintf("%s %s (%d files, %d bytes)", i.Kind, i.Ref, len(i.Files), i.TotalBytes)
}

// maxRemoteHeader bounds the safetensors header inspect reads from a registry.
const maxRemoteHeader = 16 << 20

// remoteTensorCount reads a safetensors layer's header with two ranged
// requests (the length prefix, then the header) and counts its tensors;
// ok is false when the registry serves no ranges or the header is bad.
func remoteTensorCount(ctx context.Context, r *registry.Remote, desc ocispec.Descriptor) (int, bool) {
	read := func(off, n int64) ([]byte, bool) {
		rc, err := r.GetBlob(ctx, desc, off, n)
		if err != nil {
			return nil, false
		}
		defer rc.Close()
		b := make([]byte, n)
		_, err = io.ReadFull(rc, b)
		return b, err == nil
	}
	if desc.Size < 8 {
		return 0, false
	}
	prefix, ok := read(0, 8)
	if !ok {
		return 0, false
	}
	// Untrusted: compared as unsigned before it is converted.
	u := binary.LittleEndian.Uint64(prefix)
	if u == 0 || u > maxRemoteHeader || u > uint64(desc.Size-8) {
		return 0, false
	}
	hdr, ok := read(8, int64(u))
	if !ok {
		return 0, false
	}
	h, err := artifact.ReadHeader(bytes.NewReader(append(prefix, hdr...)), desc.Size)
	if err != nil {
		return 0, false
	}
	return len(h.Tensors), true
}
