//go:build bench

package e2e

// Plain images for the benchmarks: a checkpoint's files as one uncompressed
// tar layer, over a base or alone, pushed to a registry.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// pushTarImage pushes the files of dir as one uncompressed tar layer
// (under prefix) over base, or alone when base is "", as the image ref
// (plain HTTP), and returns ref.
func pushTarImage(t *testing.T, base, dir, prefix, ref string) string {
	t.Helper()
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	layer := writeTarLayer(t, dir, prefix, layerPath)
	defer os.Remove(layerPath)
	return pushLayerImage(t, base, layerPath, layer, ref)
}

// pushLayerImage pushes the layer at layerPath (its descriptor layer) over
// base's layers (base's tag "latest"), or alone when base is "", as the
// image ref (plain HTTP), and returns ref.
func pushLayerImage(t *testing.T, base, layerPath string, layer ocispec.Descriptor, ref string) string {
	t.Helper()
	target := plainRepo(t, ref)
	m, cfg := ocispec.Manifest{}, map[string]any{}
	if base != "" {
		from := plainRepo(t, base)
		m, cfg = baseImage(t, from)
		for _, l := range m.Layers {
			rc, err := from.Fetch(context.Background(), l)
			if err != nil {
				t.Fatal(err)
			}
			pushBlob(t, target, l, rc)
			rc.Close()
		}
	}
	return pushImage(t, target, m, cfg, layerPath, layer, ref)
}

// pushFlatImage pushes base's files (base's tag "latest") and the files of
// dir (under prefix) as one uncompressed tar layer, with base's config, as
// the image ref (plain HTTP), and returns its layer's descriptor.
func pushFlatImage(t *testing.T, base, dir, prefix, ref string) ocispec.Descriptor {
	t.Helper()
	from := plainRepo(t, base)
	m, cfg := baseImage(t, from)
	var lower []io.Reader
	for _, l := range m.Layers {
		rc, err := from.Fetch(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var r io.Reader = rc
		if strings.Contains(l.MediaType, "gzip") {
			if r, err = gzip.NewReader(rc); err != nil {
				t.Fatal(err)
			}
		}
		lower = append(lower, r)
	}
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	layer := writeTarLayerOver(t, lower, dir, prefix, layerPath)
	defer os.Remove(layerPath)
	m.Layers = nil
	cfg["rootfs"] = map[string]any{"type": "layers", "diff_ids": []any{}}
	pushImage(t, plainRepo(t, ref), m, cfg, layerPath, layer, ref)
	return layer
}

// tagImage gives the image ref the tag tag too.
func tagImage(t *testing.T, ref, tag string) string {
	t.Helper()
	ctx := context.Background()
	repo := plainRepo(t, ref)
	desc, err := repo.Resolve(ctx, ref[strings.LastIndex(ref, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, desc, tag); err != nil {
		t.Fatal(err)
	}
	return ref[:strings.LastIndex(ref, ":")+1] + tag
}

// plainRepo is the repository of ref over plain HTTP.
func plainRepo(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	return repo
}

// baseImage is the manifest and config (less its history) of from's tag "latest".
func baseImage(t *testing.T, from *remote.Repository) (ocispec.Manifest, map[string]any) {
	t.Helper()
	ctx := context.Background()
	_, rawManifest, err := oras.FetchBytes(ctx, from, "latest", oras.DefaultFetchBytesOptions)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(rawManifest, &m); err != nil {
		t.Fatal(err)
	}
	rawCfg, err := content.FetchAll(ctx, from, m.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{}
	if err := json.Unmarshal(rawCfg, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "history")
	return m, cfg
}

func pushBlob(t *testing.T, target *remote.Repository, desc ocispec.Descriptor, r io.Reader) {
	t.Helper()
	if err := target.Push(context.Background(), desc, r); err != nil {
		t.Fatal(err)
	}
}

// pushImage pushes the layer at layerPath over m's layers (in target
// already) with cfg (a minimal one when empty) as ref, and returns ref.
func pushImage(t *testing.T, target *remote.Repository, m ocispec.Manifest, cfg map[string]any, layerPath string, layer ocispec.Descriptor, ref string) string {
	t.Helper()
	m.Versioned, m.MediaType = specs.Versioned{SchemaVersion: 2}, ocispec.MediaTypeImageManifest
	if m.Config.MediaType == "" {
		m.Config.MediaType = ocispec.MediaTypeImageConfig
	}
	if len(cfg) == 0 {
		cfg = map[string]any{"architecture": runtime.GOARCH, "os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": []any{}}}
	}
	rootfs := cfg["rootfs"].(map[string]any)
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), layer.Digest.String())
	rawCfg, _ := json.Marshal(cfg)

	f, err := os.Open(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	pushBlob(t, target, layer, f)
	f.Close()
	cd := ocispec.Descriptor{MediaType: m.Config.MediaType, Digest: digest.FromBytes(rawCfg), Size: int64(len(rawCfg))}
	pushBlob(t, target, cd, bytes.NewReader(rawCfg))
	m.Config, m.Layers = cd, append(m.Layers, layer)
	raw, _ := json.Marshal(m)
	md := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := target.PushReference(context.Background(), md, bytes.NewReader(raw), ref[strings.LastIndex(ref, ":")+1:]); err != nil {
		t.Fatal(err)
	}
	return ref
}

// writeTarLayer writes the files of dir under prefix as an uncompressed tar
// and returns its descriptor.
func writeTarLayer(t *testing.T, dir, prefix, path string) ocispec.Descriptor {
	t.Helper()
	return writeTarLayerOver(t, nil, dir, prefix, path)
}

// writeTarLayerOver is writeTarLayer with the entries of the tars lower
// first (uncompressed, and whiteout-free: the layers of a base image).
func writeTarLayerOver(t *testing.T, lower []io.Reader, dir, prefix, path string) ocispec.Descriptor {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	for _, r := range lower {
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(tw, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	epoch := time.Unix(0, 0)
	parts := strings.Split(prefix, "/")
	for i := range parts {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, ModTime: epoch})
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := src.Stat()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + "/" + e.Name(), Mode: 0o444, Size: fi.Size(), ModTime: epoch}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyBuffer(tw, src, make([]byte, 4<<20)); err != nil {
			t.Fatal(err)
		}
		src.Close()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.NewDigest(digest.SHA256, h), Size: cw.n}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
