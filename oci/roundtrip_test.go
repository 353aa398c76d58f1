package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/store"
)

func remoteFor(t testing.TB, f *fakeRegistry, repoTag string) *registry.Remote {
	t.Helper()
	r, err := registry.New(context.Background(), f.host()+"/"+repoTag, registry.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPushPullRoundTrip pushes an artifact, pulls it into another store
// (ranged and single-stream), and checks it is the same, fully valid artifact.
func TestPushPullRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 20<<20, 3)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	var pushed atomic.Int64
	rep, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{Progress: func(n int64) { pushed.Add(n) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Uploaded != l.Index.TotalBytes() || pushed.Load() != l.Index.TotalBytes() {
		t.Fatalf("uploaded %d, progress %d, want %d", rep.Uploaded, pushed.Load(), l.Index.TotalBytes())
	}
	// A second push finds every blob and gives the same digest.
	rep2, err := Push(ctx, l, remoteFor(t, f, "models/x:v2"), PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.Manifest != rep.Manifest || rep2.Uploaded != 0 || rep2.Existing != rep.Bytes {
		t.Fatalf("second push: %+v", rep2)
	}
	// Mounting from another repository of the same registry.
	rep3, err := Push(ctx, l, remoteFor(t, f, "other/y:v1"), PushOptions{MountFrom: []string{"models/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep3.Mounted != rep.Bytes || rep3.Uploaded != 0 {
		t.Fatalf("mount push: %+v", rep3)
	}

	for _, c := range []struct {
		name     string
		mode     RangeMode
		chunk    int64
		noRanges bool
		ranged   bool
	}{{"ranged", RangesOn, 1 << 20, false, true}, {"auto", RangesAuto, 0, false, false}, {"auto-few-files", RangesAuto, 1 << 20, false, true},
		{"stream", RangesOff, 1 << 20, false, false}, {"no-range-registry", RangesOn, 1 << 20, true, false}} {
		t.Run(c.name, func(t *testing.T) {
			f.setNoRanges(c.noRanges)
			defer f.setNoRanges(false)
			d := storetest.Open(t)
			var got atomic.Int64
			o := PullOptions{Ranges: c.mode, ChunkSize: c.chunk, Concurrency: 4, Progress: func(n int64) { got.Add(n) }}
			if c.name == "auto-few-files" {
				o.FilesInFlight = 8 // more than the 3 shards: ranges fill the workers
			}
			pl, prep, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), o)
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close()
			if pl.ID != l.ID || !prep.Built || prep.Kind != KindWeightsnap || prep.Ranged != c.ranged || got.Load() != l.Index.TotalBytes() {
				t.Fatalf("report %+v, progress %d", prep, got.Load())
			}
			sameArtifact(t, d, pl, l)
			// Pulling again is a store hit: nothing moves.
			before := f.served.Load()
			pl2, prep2, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pl2.Close()
			if prep2.Built || f.served.Load()-before > 0 {
				t.Fatalf("second pull built=%v served %d", prep2.Built, f.served.Load()-before)
			}
		})
	}
}

// TestPullCorruptBlob: a registry serving a flipped byte fails the pull with
// a typed error (errdefs.ErrDataLoss) naming the layer, a tensor's bytes by
// the tensor whose BLAKE3 disagrees with the index layer, and nothing is
// published.
func TestPullCorruptBlob(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 12<<20, 2)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	var victim digest.Digest
	var size int64
	for _, fe := range l.Index.Files {
		if artifact.IsSafetensors(fe.Path) && fe.Size > size {
			victim, size = digest.NewDigestFromEncoded(digest.SHA256, fe.SHA256), fe.Size
		}
	}
	if size < 5<<20 {
		t.Fatalf("largest shard is %d bytes", size)
	}
	for _, c := range []struct{ chunk, at int64 }{{1 << 20, 12345}, {-1, 12345}, {1 << 20, 100}, {-1, 100}, {1 << 20, 1<<20 + 5}} {
		chunk := c.chunk
		f.setCorrupt(func(d digest.Digest) int64 {
			if d == victim {
				return c.at // in the header (100) or the tensor data
			}
			return -1
		})
		d := storetest.Open(t)
		_, _, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), PullOptions{Ranges: RangesOn, ChunkSize: chunk})
		// A flipped header byte is malformed JSON or a wrong header BLAKE3
		// (the layer's sha256 tells which, diagnose); a flipped tensor
		// byte fails the tensor's BLAKE3.
		var em *artifact.EntryMismatchError
		inTensor := errors.As(err, &em) && em.Tensor != "" && em.Field == "blake3"
		if !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), victim.String()) || inTensor != (c.at > 1000) {
			t.Fatalf("chunk %d, byte %d: want the layer %s's bytes refused, got %v", chunk, c.at, victim, err)
		}
		list, _ := d.List(ctx)
		if len(list) != 0 {
			t.Fatalf("chunk %d: %d artifacts after a corrupt pull", chunk, len(list))
		}
		if _, err := d.Lookup(ctx, l.ID, ""); !errors.Is(err, store.ErrMiss) {
			t.Fatalf("lookup after a corrupt pull: %v", err)
		}
	}
}

// pushEdited pushes the lease's payload under identity id with index x and
// pieces layer pieces (each possibly edited, as a lying publisher would; nil
// pieces for none) and returns the remote.
func pushEdited(t *testing.T, l *store.Lease, id artifact.Identity, x *artifact.Index, pieces []byte, ref string) *registry.Remote {
	t.Helper()
	ctx := context.Background()
	a, err := NewArtifact(id, x, pieces)
	if err != nil {
		t.Fatal(err)
	}
	r := remoteFor(t, newFakeRegistry(t), ref)
	blobs := []blobSource{{desc: a.IndexDesc, data: a.Index}, {desc: a.ConfigDesc, data: a.Config}}
	if pieces != nil {
		blobs = append(blobs, blobSource{desc: a.PiecesDesc, data: a.Pieces})
	}
	for i, lf := range l.Files() {
		blobs = append(blobs, blobSource{desc: a.Layers[i], data: storetest.Data(t, lf)})
	}
	for _, b := range blobs {
		if _, err := pushBlob(ctx, r, b, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pushManifest(ctx, r, a.ManifestDesc, a.Manifest); err != nil {
		t.Fatal(err)
	}
	return r
}

// lyingIndex is the lease's index with one tensor's BLAKE3 replaced; with
// tree, the file's tensor tree is recomputed to match (a consistent lie).
func lyingIndex(t *testing.T, l *store.Lease, tree bool) (*artifact.Index, artifact.TensorEntry) {
	x := *l.Index
	x.Files = append([]artifact.FileEntry(nil), l.Index.Files...)
	for i, fe := range x.Files {
		if len(fe.Tensors) > 1 {
			fe.Tensors = append([]artifact.TensorEntry(nil), fe.Tensors...)
			fe.Tensors[1].BLAKE3 = strings.Repeat("0", 64)
			if tree {
				fe.BLAKE3, _ = artifact.EntryTree(fe)
			}
			x.Files[i] = fe
			return &x, fe.Tensors[1]
		}
	}
	t.Fatal("no file with two tensors")
	return nil, artifact.TensorEntry{}
}

// TestPullOfALyingIndex: an index layer that lies about one tensor's BLAKE3
// (its sha256s true, its tree consistent) is refused as the tensor arrives,
// for the pull checks the bytes against the tree (artifact.BindTreeStream),
// naming the tensor, and nothing is published. An index whose tree does not
// match its own tensors is refused at planning.
func TestPullOfALyingIndex(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 2<<20, 1)
	_, l := imported(t, src)

	x, lie := lyingIndex(t, l, true)
	d := storetest.Open(t)
	_, _, err := Pull(ctx, d, pushEdited(t, l, l.Identity(), x, nil, "models/lie:v1"), PullOptions{})
	var em *artifact.EntryMismatchError
	if !errdefs.IsDataLoss(err) || !errors.As(err, &em) || em.Tensor != lie.Name || em.Field != "blake3" {
		t.Fatalf("pull of a consistent lie: %v, want tensor %s refused", err, lie.Name)
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Fatal("the lie was published")
	}

	x, _ = lyingIndex(t, l, false)
	d = storetest.Open(t)
	_, _, err = Pull(ctx, d, pushEdited(t, l, l.Identity(), x, nil, "models/bad:v1"), PullOptions{})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "tree") {
		t.Fatalf("pull of an index inconsistent with itself: %v", err)
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Fatal("an artifact was published")
	}
}

// TestPullRefusesAForgedPassthroughIdentity: a passthrough identity whose
// source fingerprint disagrees with a layer's sha256 is an identity
// collision at pull, and nothing is published.
func TestPullRefusesAForgedPassthroughIdentity(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 2<<20, 1)
	_, l := imported(t, src)
	forged := l.Identity()
	forged.Model.Source = append([]artifact.SourceFile(nil), forged.Model.Source...)
	forged.Model.Source[0].SHA256 = strings.Repeat("e", 64)
	x := *l.Index
	forgedID, _ := forged.ID()
	x.ID = forgedID
	d := storetest.Open(t)
	_, _, err := Pull(ctx, d, pushEdited(t, l, forged, &x, nil, "models/forged:v1"), PullOptions{})
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "identity collision: passthrough identity's source fingerprint and payload disagree at ") ||
		!strings.Contains(err.Error(), ": sha256: fingerprint says ") {
		t.Fatalf("pull of a forged passthrough identity: %v", err)
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Fatal("an artifact was published")
	}
}

// TestPullForeign imports an artifact pushed the way `oras push` does.
func TestPullForeign(t *testing.T) {
	ctx := context.Background()
	dir, src := storetest.Checkpoint(t, 3<<20, 2)
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "hub/model:main")
	m := orasManifest(src)
	cfg := blobSource{desc: ocispec.DescriptorEmptyJSON, data: []byte("{}")}
	if _, err := pushBlob(ctx, r, cfg, nil, newPushProgress(nil)); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		data, err := os.ReadFile(filepath.Join(dir, l.Annotations[ocispec.AnnotationTitle]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pushBlob(ctx, r, blobSource{desc: l, data: data}, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := jsonMarshal(m)
	if err := pushManifest(ctx, r, descriptorOf(ocispec.MediaTypeImageManifest, raw), raw); err != nil {
		t.Fatal(err)
	}
	d := storetest.Open(t)
	if _, _, err := Pull(ctx, d, r, PullOptions{}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("pull without --revision: %v", err)
	}
	l, rep, err := Pull(ctx, d, r, PullOptions{ChunkSize: 1 << 20, Import: ImportOptions{Repository: "org/model", Revision: storetest.Revision}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want, _ := storetest.Identity(src).ID()
	if l.ID != want || rep.Kind != KindForeign {
		t.Fatalf("imported %s (%s), want the import identity %s", l.ID, rep.Kind, want)
	}
	full, err := d.Lookup(ctx, l.ID, store.FullChecksum)
	if err != nil {
		t.Fatal(err)
	}
	full.Close()
	info, err := InspectRemote(ctx, r, InspectOptions{})
	if err != nil || info.Kind != "foreign-artifact" || len(info.Files) != len(src.Files) || info.TensorCount != l.Index.TensorCount() {
		t.Fatalf("inspect: %v %+v", err, info)
	}
}

// TestImageBuild composes weight images over a base in another repository
// (mounted, not copied) and over scratch, and inspects them.
func TestImageBuild(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	art := remoteFor(t, f, "models/x:v1")
	prep, err := Push(ctx, l, art, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A one-layer base image in library/base.
	base := remoteFor(t, f, "library/base:1")
	layer := []byte("not really a tar, but a blob")
	ld := descriptorOf(ocispec.MediaTypeImageLayer, layer)
	bcfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["` + ld.Digest.String() + `"]},"config":{"Cmd":["/bin/sh"]}}`)
	cd := descriptorOf(ocispec.MediaTypeImageConfig, bcfg)
	for _, b := range []blobSource{{desc: ld, data: layer}, {desc: cd, data: bcfg}} {
		if _, err := pushBlob(ctx, base, b, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	bm, _ := jsonMarshal(ocispec.Manifest{Versioned: manifestV2(), MediaType: ocispec.MediaTypeImageManifest, Config: cd, Layers: []ocispec.Descriptor{ld}})
	if err := pushManifest(ctx, base, descriptorOf(ocispec.MediaTypeImageManifest, bm), bm); err != nil {
		t.Fatal(err)
	}
	uploadedBefore := f.uploaded.Load()
	target := remoteFor(t, f, "apps/llm:v1")
	rep, err := BuildImage(ctx, target, ImageOptions{Base: base.String(), Weights: []WeightMount{{Ref: art.String(), Target: "/models/x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MountedBlobs != 1 || rep.BaseLayers != 1 || len(rep.Pointers) != 1 || rep.Pointers[0].Artifact != art.Name()+"@"+prep.Manifest {
		t.Fatalf("report %+v", rep)
	}
	if up := f.uploaded.Load() - uploadedBefore; up > 16<<10 {
		t.Fatalf("image build uploaded %d bytes: more than pointers, config and manifest", up)
	}
	again, err := BuildImage(ctx, remoteFor(t, f, "apps/llm:v2"), ImageOptions{Base: base.String(), Weights: []WeightMount{{Ref: art.String(), Target: "/models/x"}}})
	if err != nil || again.Manifest != rep.Manifest {
		t.Fatalf("rebuild gave %v %v", again, err)
	}
	info, err := InspectRemote(ctx, target, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != "weight-image" || len(info.Pointers) != 1 || info.Pointers[0].Info == nil || info.Pointers[0].Info.Kind != "weightsnap-artifact" ||
		info.TotalBytes != l.Index.TotalBytes() || info.TensorCount != l.Index.TensorCount() {
		t.Fatalf("inspect %+v", info)
	}

	scratch, err := BuildImage(ctx, remoteFor(t, f, "apps/weights:v1"), ImageOptions{Base: Scratch, Weights: []WeightMount{{Ref: art.String(), Target: "/w"}}})
	if err != nil || scratch.BaseLayers != 0 {
		t.Fatalf("scratch: %+v %v", scratch, err)
	}
	// A base in another registry cannot be mounted: refused, not copied.
	f2 := newFakeRegistry(t)
	_, err = BuildImage(ctx, remoteFor(t, f2, "apps/llm:v1"), ImageOptions{Base: base.String(), Weights: []WeightMount{{Ref: art.String(), Target: "/models/x"}}})
	if !errdefs.IsNotImplemented(err) {
		t.Fatalf("cross-registry base: %v", err)
	}
}

// TestPullZeroPrefix: a safetensors blob starting with a zero length prefix
// fails fast (the store's hasher would not terminate on it), as invalid data.
func TestPullZeroPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "evil/zero:v1")
	data := make([]byte, 6<<20)
	layer := descriptorOf(ocispec.MediaTypeImageLayer, data)
	layer.Annotations = map[string]string{ocispec.AnnotationTitle: "model.safetensors"}
	for _, b := range []blobSource{{desc: ocispec.DescriptorEmptyJSON, data: []byte("{}")}, {desc: layer, data: data}} {
		if _, err := pushBlob(ctx, r, b, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := jsonMarshal(ocispec.Manifest{Versioned: manifestV2(), MediaType: ocispec.MediaTypeImageManifest, Config: ocispec.DescriptorEmptyJSON, Layers: []ocispec.Descriptor{layer}})
	if err := pushManifest(ctx, r, descriptorOf(ocispec.MediaTypeImageManifest, raw), raw); err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int64{1 << 20, -1} {
		_, _, err := Pull(ctx, storetest.Open(t), r, PullOptions{Ranges: RangesOn, ChunkSize: chunk, Import: ImportOptions{Revision: storetest.Revision}})
		if !errdefs.IsDataLoss(err) { // a malformed file is invalid data (exit 4)
			t.Fatalf("chunk %d: %v", chunk, err)
		}
	}
}

// resumeWriter is a store writer that holds every file of an interrupted
// build, reporting the given entries for them. The memory writer it embeds
// is never written to.
type resumeWriter struct {
	storetest.MemWriter
	entries map[string]artifact.FileEntry
}

func (w *resumeWriter) Create(string, int64) (artifact.FileWriter, error) {
	return nil, errors.New("nothing should be fetched")
}

func (w *resumeWriter) Reuse(b artifact.Binding) (artifact.FileEntry, bool, error) {
	e, ok := w.entries[b.Want.Path]
	return e, ok && e.Size == b.Want.Size && e.SHA256 == b.Want.SHA256, nil
}

// TestReuseChecksIndex: files reused from an interrupted pull are compared
// with the pulled index like fetched ones, before publication.
func TestReuseChecksIndex(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	_, l := imported(t, src)
	a, err := NewArtifact(l.Identity(), l.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := DecodeManifest("r", a.Manifest)
	plan, err := PlanWeightsnap("r", m, a.Index)
	if err != nil {
		t.Fatal(err)
	}
	w := &resumeWriter{entries: map[string]artifact.FileEntry{}}
	for _, e := range l.Index.Files {
		w.entries[e.Path] = e
	}
	p := &puller{plan: plan}
	if err := p.Produce(context.Background(), w); err != nil {
		t.Fatalf("a complete, consistent resume: %v", err)
	}
	if p.reusedFiles.Load() != int64(len(plan.Files)) {
		t.Fatalf("reused %d of %d files", p.reusedFiles.Load(), len(plan.Files))
	}
	for path, e := range w.entries {
		if len(e.Tensors) > 0 {
			e.Tensors = append([]artifact.TensorEntry(nil), e.Tensors...)
			e.Tensors[0].BLAKE3 = strings.Repeat("0", 64)
			w.entries[path] = e
			break
		}
	}
	p = &puller{plan: plan}
	err = p.Produce(context.Background(), w)
	var em *artifact.EntryMismatchError
	if !errors.As(err, &em) || em.Field != "blake3" {
		t.Fatalf("a reused file that disagrees with the index: %v", err)
	}
}
