package oci

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// tarLayers is a ModelPack manifest of a checkpoint: its first file a raw
// layer, the others in one tar layer of c under dir "ckpt" (entries
// "ckpt/<file>", as modctl writes a directory), with the blobs.
func tarLayers(t *testing.T, c Compression) (*ocispec.Manifest, map[digest.Digest][]byte, *artifact.SourceDir) {
	t.Helper()
	ckpt, src := storetest.Checkpoint(t, 2<<20, 3)
	blobs := map[digest.Digest][]byte{}
	first := src.Files[0]
	raw, err := os.ReadFile(filepath.Join(ckpt, first.Path))
	if err != nil {
		t.Fatal(err)
	}
	rawDesc := descriptorOf(LayerMediaType(first.Path), raw)
	rawDesc.Annotations = map[string]string{AnnotationFilepath: first.Path}
	blobs[rawDesc.Digest] = raw
	entries := []tarEntry{dir("ckpt/")}
	for _, f := range src.Files[1:] {
		b, err := os.ReadFile(filepath.Join(ckpt, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, file("ckpt/"+f.Path, string(b)))
	}
	blob := compress(t, c, makeTar(t, entries, ""))
	a := archiveOf("ckpt", c, blob)
	blobs[a.Layer.Digest] = blob
	cfg := []byte(`{"descriptor":{"revision":"` + storetest.Revision + `"},"config":{},"modelfs":{"type":"layers","diffIds":[]}}`)
	cfgDesc := descriptorOf(MediaTypeModelConfig, cfg)
	blobs[cfgDesc.Digest] = cfg
	m := &ocispec.Manifest{Versioned: manifestV2(), MediaType: ocispec.MediaTypeImageManifest, ArtifactType: ArtifactTypeModel,
		Config: cfgDesc, Layers: []ocispec.Descriptor{a.Layer, rawDesc}}
	return m, blobs, src
}

// pushLayers pushes a manifest and its blobs to the fake registry.
func pushLayers(t *testing.T, f *fakeRegistry, repoTag string, m *ocispec.Manifest, blobs map[digest.Digest][]byte) {
	t.Helper()
	ctx := context.Background()
	r := remoteFor(t, f, repoTag)
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if _, err := pushBlob(ctx, r, blobSource{desc: d, data: blobs[d.Digest]}, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := jsonMarshal(m)
	if err := pushManifest(ctx, r, descriptorOf(ocispec.MediaTypeImageManifest, raw), raw); err != nil {
		t.Fatal(err)
	}
}

// TestPlanForeignArchives: tar layers plan from the manifest alone, each a
// source of its path, size and layer digest under the unpack producer, so
// two nodes decoding one manifest plan one identity; another tar layer is
// another identity.
func TestPlanForeignArchives(t *testing.T) {
	m, _, _ := tarLayers(t, CompressionZstd)
	raw, _ := jsonMarshal(m)
	var ids []artifact.ID
	for range 2 { // two nodes
		dm, err := DecodeManifest("reg/x:1", raw)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := PlanForeign("reg/x:1", dm, ImportOptions{Revision: storetest.Revision})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Archives) != 1 || len(plan.Files) != 1 || plan.Archives[0].Compression != CompressionZstd || plan.Identity.Producer != unpackRef() {
			t.Fatalf("plan %+v", plan)
		}
		src := plan.Identity.Model.Source
		if len(src) != 2 || src[0].Path != "ckpt" || src[0].SHA256 != m.Layers[0].Digest.Encoded() || src[0].Size != m.Layers[0].Size {
			t.Fatalf("sources %+v", src)
		}
		id, _ := plan.Identity.ID()
		ids = append(ids, id)
	}
	if ids[0] != ids[1] {
		t.Fatal("one manifest planned two identities")
	}
	m.Layers[0].Digest = digest.FromString("another tar")
	plan, err := PlanForeign("reg/x:1", m, ImportOptions{Revision: storetest.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := plan.Identity.ID(); id == ids[0] {
		t.Fatal("another tar layer, the same identity")
	}
	// Only tar layers: their safetensors files are checked once extracted.
	m.Layers = m.Layers[:1]
	if _, err := PlanForeign("reg/x:1", m, ImportOptions{Revision: storetest.Revision}); err != nil {
		t.Fatal(err)
	}
}

// TestPullArchives: a ModelPack artifact with a raw layer and a tar layer
// (uncompressed, gzip, zstd) pulls into the store with every file at its
// path and passes a full verification; two stores pulling the manifest
// build one identity.
func TestPullArchives(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFakeRegistry(t)
	for _, c := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		m, blobs, src := tarLayers(t, c)
		tag := "models/tar-" + string(c) + ":v1"
		if c == CompressionNone {
			tag = "models/tar:v1"
		}
		pushLayers(t, f, tag, m, blobs)
		var ids []artifact.ID
		for range 2 {
			d := storetest.Open(t)
			l, rep, err := Pull(ctx, d, remoteFor(t, f, tag), PullOptions{Import: ImportOptions{Revision: storetest.Revision}})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			defer l.Close()
			if !rep.Built || rep.Files != len(src.Files) || rep.Kind != KindForeign {
				t.Fatalf("%s: report %+v", c, rep)
			}
			files := l.Files()
			for i, sf := range src.Files {
				want := sf.Path
				if i > 0 {
					want = "ckpt/" + sf.Path
				}
				e := l.Index.Files
				found := false
				for j := range e {
					if e[j].Path == want && e[j].SHA256 == sf.SHA256 && e[j].Size == sf.Size {
						found = true
					}
				}
				if !found {
					t.Fatalf("%s: %s missing from %+v (%d files)", c, want, e, len(files))
				}
			}
			full, err := d.Lookup(ctx, l.ID, store.FullChecksum)
			if err != nil {
				t.Fatalf("%s: full verification: %v", c, err)
			}
			full.Close()
			ids = append(ids, l.ID)
		}
		if ids[0] != ids[1] {
			t.Fatalf("%s: two stores built %s and %s", c, ids[0], ids[1])
		}
	}
}

// TestPullHostileArchive: a tar layer with a link out, or whose bytes are
// not its digest's, is refused with its class and nothing is published.
func TestPullHostileArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFakeRegistry(t)
	m, blobs, _ := tarLayers(t, CompressionGzip)
	pushLayers(t, f, "models/good:v1", m, blobs)
	hostile := compress(t, CompressionGzip, makeTar(t, []tarEntry{dir("ckpt/"), special('2', "ckpt/x.safetensors", "../../../etc/shadow")}, ""))
	a := archiveOf("ckpt", CompressionGzip, hostile)
	blobs[a.Layer.Digest] = hostile
	hm := *m
	hm.Layers = []ocispec.Descriptor{a.Layer, m.Layers[1]}
	pushLayers(t, f, "models/evil:v1", &hm, blobs)

	d := storetest.Open(t)
	_, _, err := Pull(ctx, d, remoteFor(t, f, "models/evil:v1"), PullOptions{Import: ImportOptions{Revision: storetest.Revision}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "a link") || !strings.Contains(err.Error(), a.Layer.Digest.String()) {
		t.Fatalf("symlink out: %v", err)
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Fatalf("%d artifacts published", len(list))
	}
	// The registry serves the good tar layer with a byte flipped late in
	// it, where only the digest tells.
	f.setCorrupt(func(dg digest.Digest) int64 {
		if dg == m.Layers[0].Digest {
			return m.Layers[0].Size - 9 // gzip's trailer: its CRC
		}
		return -1
	})
	_, _, err = Pull(ctx, d, remoteFor(t, f, "models/good:v1"), PullOptions{Import: ImportOptions{Revision: storetest.Revision}})
	if err == nil {
		t.Fatal("a corrupted tar layer was pulled")
	}
	t.Log(err)
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Fatalf("%d artifacts published", len(list))
	}
}
