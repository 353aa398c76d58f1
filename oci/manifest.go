package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
)

// Docker schema 2 media types, converted to their OCI equivalents when an
// image is rewritten.
const (
	dockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerConfig       = "application/vnd.docker.container.image.v1+json"
	dockerLayer        = "application/vnd.docker.image.rootfs.diff.tar"
	dockerLayerGzip    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	dockerLayerZstd    = "application/vnd.docker.image.rootfs.diff.tar.zstd"
	dockerForeignGzip  = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
)

// HostPlatform is linux/<GOARCH>, the platform picked from image indexes.
func HostPlatform() string { return "linux/" + runtime.GOARCH }

// Resolved is a manifest fetched from a registry.
type Resolved struct {
	Desc     ocispec.Descriptor // of the manifest (not of the index it was picked from)
	Raw      []byte
	Manifest *ocispec.Manifest
}

// resolveManifest fetches the remote's manifest; from an image index it
// picks the manifest of platform ("os/arch[/variant]").
func resolveManifest(ctx context.Context, r *registry.Remote, platform string) (*Resolved, error) {
	desc, raw, err := r.FetchManifest(ctx)
	if err != nil {
		return nil, err
	}
	var probe struct {
		MediaType string            `json:"mediaType"`
		Manifests []json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, manifestError(r.String(), "manifest is not JSON: "+err.Error())
	}
	if probe.MediaType == ocispec.MediaTypeImageIndex || probe.MediaType == dockerManifestList || (probe.MediaType == "" && probe.Manifests != nil) {
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, manifestError(r.String(), "index: "+err.Error())
		}
		pick, err := pickPlatform(r.String(), idx.Manifests, platform)
		if err != nil {
			return nil, err
		}
		sub, err := r.Sibling(r.Name() + "@" + pick.Digest.String())
		if err != nil {
			return nil, err
		}
		if desc, raw, err = sub.FetchManifest(ctx); err != nil {
			return nil, err
		}
	}
	m, err := DecodeManifest(r.String(), raw)
	if err != nil {
		return nil, err
	}
	return &Resolved{Desc: desc, Raw: raw, Manifest: m}, nil
}

// pickPlatform chooses the manifest of platform from an index's list, as
// containerd matches platforms (normalized: arm64 is arm64/v8).
func pickPlatform(ref string, ms []ocispec.Descriptor, platform string) (ocispec.Descriptor, error) {
	if platform == "" {
		platform = HostPlatform()
	}
	want, err := platforms.Parse(platform)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("platform %q is not os/arch[/variant]: %w", platform, errdefs.ErrInvalidArgument)
	}
	match := platforms.NewMatcher(want)
	for _, m := range ms {
		if m.Platform != nil && match.Match(*m.Platform) {
			return m, nil
		}
	}
	return ocispec.Descriptor{}, manifestError(ref, "no manifest for platform "+platform)
}

// ociMediaType maps Docker schema 2 types to OCI ones; others pass unchanged.
func ociMediaType(mt string) string {
	switch mt {
	case dockerManifest:
		return ocispec.MediaTypeImageManifest
	case dockerConfig:
		return ocispec.MediaTypeImageConfig
	case dockerLayer:
		return ocispec.MediaTypeImageLayer
	case dockerLayerGzip:
		return ocispec.MediaTypeImageLayerGzip
	case dockerLayerZstd:
		return ocispec.MediaTypeImageLayerZstd
	case dockerForeignGzip:
		//lint:ignore SA1019 a Docker foreign layer's OCI type is the deprecated non-distributable one
		return ocispec.MediaTypeImageLayerNonDistributableGzip
	}
	return mt
}
