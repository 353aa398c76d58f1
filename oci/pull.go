package oci

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
	"golang.org/x/sync/errgroup"
)

// PullProducerName is the producer name a pulled artifact's READY.json records.
const PullProducerName = "oci-pull"

// PullOptions tune a pull: its transfers, its memory, its identity fields and its trust policy.
type PullOptions struct {
	// Concurrency is the number of blob transfers in flight: whole layers, or ranges of large ones.
	// 0 means DefaultConcurrency.
	Concurrency int
	// Ranges says when a large blob is fetched as parallel ranges, written in order, not as one
	// stream. RangesAuto, the default, cuts ranges when there are fewer large files than
	// FilesInFlight. It also cuts them when one connection to the registry is slow. A connection is
	// slow when the registry is far away, or sends its blobs from another host. RangesOn always
	// cuts ranges; RangesOff never does. Ranges are used only where the registry serves them.
	Ranges RangeMode
	// ChunkSize is the range size. 0 means DefaultChunkSize; a negative size turns ranged fetches
	// off.
	ChunkSize int64
	// FilesInFlight is how many large files are fetched at once, their ranges interleaved. So it is
	// how many files a killed pull leaves partly written. 0 means artifact.FilesInFlight().
	FilesInFlight int
	// Buffers is how many ranges of ChunkSize bytes may be held in memory. A range is held while it
	// is fetched and while it waits for its turn to be written. 0 means Concurrency+2.
	Buffers int
	// Import gives the identity fields of an artifact weightsnap did not write.
	Import ImportOptions
	// OnPlan, if set, is called once the plan is known, before any transfer.
	OnPlan func(*Plan)
	// Progress, if set, is told of payload bytes fetched or reused. It is called from several
	// goroutines at once.
	Progress func(n int64)
	// Policy, if set, is checked against the resolved manifest before anything else, a store hit
	// included. A refusal ends the pull with nothing published. The rest of the pull reads that
	// same manifest, so a tag moved meanwhile cannot swap it. It is read at each check.
	Policy trust.Source
	// Reused, if set, is told of the bytes of Progress that an interrupted pull had already
	// fetched. A rate can leave them out.
	Reused func(n int64)
}

// RangeMode is PullOptions.Ranges: when a pull fetches large blobs as ranges.
type RangeMode string

// Range modes.
const (
	RangesAuto RangeMode = ""
	RangesOn   RangeMode = "on"
	RangesOff  RangeMode = "off"
)

// Defaults of PullOptions and PushOptions.
const (
	DefaultConcurrency = 8
	DefaultChunkSize   = 8 << 20
)

// PullReport says what a pull did: what it fetched, reused and verified, and how long it took.
type PullReport struct {
	Ref      string `json:"ref"`
	Manifest string `json:"manifest"`
	Kind     Kind   `json:"kind"`
	store.TransferReport
	Seconds float64 `json:"seconds"`
	// Verified says how the trust policy's requirements were met. It is absent without
	// PullOptions.Policy. Unverified is true where no policy file exists and everything is
	// accepted.
	Verified   []trust.Verified `json:"verified,omitempty"`
	Unverified bool             `json:"unverified,omitempty"`
}

// MarshalJSON is the report's encoding that `weightsnap pull --json` prints. It holds the fields,
// and the identity's hex under "id".
func (r PullReport) MarshalJSON() ([]byte, error) {
	type fields PullReport
	return jsonobj.Concat(fields(r), struct {
		Hex string `json:"id"`
	}{r.ID.Hex()})
}

// plan fetches a manifest's index layer, if it has one, and plans the pull.
// The index layer is bounded by what the manifest's files can need
// (artifact.IndexBound) before a byte of it is read. Pull, the registry
// providers, image build and inspect all read a remote artifact the same
// way: resolveManifest, their own check of the manifest, then plan.
func planRemote(ctx context.Context, r *registry.Remote, m *ocispec.Manifest, o ImportOptions) (*Plan, error) {
	idx, ok := IndexLayer(m)
	if !ok {
		return PlanForeign(r.String(), m, o)
	}
	var paths []string
	var sizes []int64
	for _, l := range m.Layers {
		if !metaLayer(l) {
			paths, sizes = append(paths, LayerPath(l)), append(sizes, l.Size)
		}
	}
	x, err := r.FetchSmall(ctx, idx, "index layer of "+r.String(), artifact.IndexBound(paths, sizes))
	if err != nil {
		return nil, err
	}
	return PlanWeightsnap(r.String(), m, x)
}

// annotatedIdentity is the identity a weightsnap artifact's manifest names.
func annotatedIdentity(m *ocispec.Manifest) (artifact.Identity, bool) {
	if _, ok := IndexLayer(m); !ok {
		return artifact.Identity{}, false
	}
	id, err := artifact.ParseIdentity([]byte(m.Annotations[AnnotationIdentity]))
	if err != nil {
		return artifact.Identity{}, false
	}
	want, err := artifact.ParseID(m.Annotations[AnnotationIdentityDigest])
	if d, derr := id.ID(); err != nil || derr != nil || d != want {
		return artifact.Identity{}, false
	}
	return id, true
}

// Pull materialises a remote artifact in the store and returns a lease on it. Blobs stream from the
// registry straight into the store's writer, several at once. Large blobs come in parallel ranges.
// Each byte is hashed once. For a weightsnap artifact, the writer checks each file against the
// index layer. The manifest's sha256 chain pins that index layer to these layers. The writer checks
// the safetensors header, its BLAKE3 and tensor table. It checks every tensor's BLAKE3 as the
// tensor ends, then the file's tree. The index's sha256 of the file, the layer digest, is recorded,
// bound by that tree (artifact.BindTreeStream). So the pull computes BLAKE3 only, which costs less
// CPU than sha256; a pull is bound by its CPU. A foreign artifact's writer computes the sha256,
// checked against the layer digest, and the tensor tree. On any mismatch nothing becomes READY. A
// pull killed part way resumes from the files it completed, and inside the file it was writing.
func Pull(ctx context.Context, d *store.Domain, r *registry.Remote, o PullOptions) (*store.Lease, *PullReport, error) {
	start := time.Now()
	resolved, err := resolveManifest(ctx, r, "")
	if err != nil {
		return nil, nil, err
	}
	if err := weightImageError(r.String(), resolved.Manifest); err != nil {
		return nil, nil, err
	}
	rep := &PullReport{Ref: r.String(), Manifest: resolved.Desc.Digest.String(), Kind: KindWeightsnap}
	pol := current(o.Policy)
	rec, err := verifyResolved(ctx, pol, r, resolved)
	if err != nil {
		return nil, nil, fmt.Errorf("pull %s: %w", r, err)
	}
	if rec != nil {
		rep.Verified, rep.Unverified = rec.Verified, pol.Unverified
	}
	// The record of the verification is kept before the artifact is
	// published (or, for a store hit, before it is leased).
	keep := func(id artifact.ID) error {
		if rec == nil {
			return nil
		}
		return KeepRecord(ctx, d, id, *rec)
	}
	var mo store.MaterialiseOptions
	// A weightsnap artifact names its identity: a store hit needs nothing more.
	if id, ok := annotatedIdentity(resolved.Manifest); ok {
		mo.ID, _ = id.ID()
		if err := keep(mo.ID); err != nil {
			return nil, nil, err
		}
	}
	plan := func(ctx context.Context) (artifact.Identity, artifact.Producer, error) {
		p, err := planRemote(ctx, r, resolved.Manifest, o.Import)
		if err != nil {
			return artifact.Identity{}, nil, err
		}
		if rep.ID, err = p.Identity.ID(); err != nil {
			return artifact.Identity{}, nil, err
		}
		if mo.ID.IsZero() {
			if err := keep(rep.ID); err != nil {
				return artifact.Identity{}, nil, err
			}
		}
		rep.Kind, rep.Files, rep.Bytes = p.Kind, len(p.Files), p.TotalBytes()
		if o.OnPlan != nil {
			o.OnPlan(p)
		}
		return p.Identity, newPuller(r, p, o), nil
	}
	lease, m, err := d.Materialise(ctx, plan, mo)
	rep.Seconds = time.Since(start).Seconds()
	if m.Transfer != nil {
		rep.Transfer = *m.Transfer
	}
	if err != nil {
		if !m.Planned {
			return nil, nil, err
		}
		return nil, rep, err
	}
	rep.TransferReport = m.Report(lease)
	log.G(ctx).WithField("ref", rep.Ref).WithField("id", rep.ID).WithField("built", rep.Built).
		WithField("fetched", rep.Fetched).WithField("reused", rep.Reused).Debug("pull done")
	return lease, rep, nil
}

// puller is the producer of a pull: it writes every planned file through
// the store's writer.
type puller struct {
	r    *registry.Remote
	plan *Plan
	o    PullOptions

	ranged       bool
	openMu       sync.Mutex
	open         map[*fileTask]struct{} // created in the store, not finished
	chunk        int64                  // the range size
	bufs         chan *[]byte           // free range buffers, chunk bytes each (rangeBuffer)
	fetched      atomic.Int64
	reused       atomic.Int64
	reusedFiles  atomic.Int64
	resumedFiles atomic.Int64
	continued    map[string]continued     // files continued from a kept prefix (reuse)
	seed         artifact.Seeder          // the writer, when this node serves what it pulls (seed.go)
	pieces       map[string][]filePiece   // each file's pieces in file order, when seed has a pieces layer
	units        map[string][]*unitPieces // each file's units with pieces, in file order
	pieceBufs    sync.Pool                // piece buffers, blake3.PieceSize bytes each
	record       *trust.Record            // how the policy was met, when it was checked
}

// Verification implements Attested: how the artifact's manifest met the trust policy. It is nil
// when no policy was checked.
func (p *puller) Verification() *trust.Record { return p.record }

func newPuller(r *registry.Remote, plan *Plan, o PullOptions) *puller {
	return &puller{r: r, plan: plan, o: o, open: map[*fileTask]struct{}{}}
}

func (p *puller) Name() string { return PullProducerName }

// Transfer implements store.TransferReporter.
func (p *puller) Transfer() store.Transfer {
	return store.Transfer{Endpoint: p.r.String(), Fetched: p.fetched.Load(), Reused: p.reused.Load(),
		ReusedFiles: int(p.reusedFiles.Load()), ResumedFiles: int(p.resumedFiles.Load()), Ranged: p.ranged}
}

// Progress implements artifact.ProgressReporter.
func (p *puller) Progress() (done, total int64) {
	return p.fetched.Load() + p.reused.Load(), p.plan.TotalBytes()
}

func (p *puller) progress(n int64) {
	if p.o.Progress != nil && n > 0 {
		p.o.Progress(n)
	}
}

// Produce implements artifact.Producer.
func (p *puller) Produce(ctx context.Context, w artifact.Writer) error {
	if err := p.announce(ctx, w); err != nil {
		return err
	}
	todo, err := p.reuse(ctx, w)
	if err != nil {
		return err
	}
	// The manifest gives the files' sizes: room is made, or refused, before
	// any payload byte (an archive layer's files meet each file's preflight).
	var total int64
	for _, f := range p.plan.Files {
		total += f.Size
	}
	if err := w.Reserve(total); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if len(todo) > 0 {
		g.Go(func() error { return p.fetchAll(gctx, w, todo) })
	}
	if len(p.plan.Archives) > 0 {
		g.Go(func() error { return p.unpackAll(gctx, w) })
	}
	return g.Wait()
}

// reuse adopts the raw files an interrupted build of the same artifact
// completed, hashing them back in parallel, and returns the files still to
// fetch. A tar layer's files are never reused: the layer is read whole
// again, since only its digest pins them.
func (p *puller) reuse(ctx context.Context, w artifact.Writer) ([]PlanFile, error) {
	done := make([]bool, len(p.plan.Files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range p.plan.Files {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			entry, ok, err := w.Reuse(f.Binding)
			if err != nil {
				return fmt.Errorf("reuse %s: %w", f.Path, err)
			}
			if !ok {
				return nil
			}
			if err := p.checkEntry(f, entry); err != nil {
				return err
			}
			if err := p.verified(f); err != nil {
				return err
			}
			done[i] = true
			p.reused.Add(f.Size)
			p.reusedFiles.Add(1)
			if p.o.Reused != nil {
				p.o.Reused(f.Size)
			}
			p.progress(f.Size)
			log.G(ctx).WithField("file", f.Path).Debug("reused from an interrupted pull")
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var todo []PlanFile
	for i, f := range p.plan.Files {
		if !done[i] {
			todo = append(todo, f)
		}
	}
	if err := p.continueKept(ctx, w, todo); err != nil {
		return nil, err
	}
	return todo, nil
}

// continued is a file continued from the prefix an interrupted pull of
// the same artifact verified, wrote and synced.
type continued struct {
	fw  artifact.FileWriter
	off int64
}

// continueKept continues, from its kept prefix, each file still to fetch
// that an interrupted build wrote in part (artifact.PartResumer), when
// the registry serves the ranges the rest needs.
func (p *puller) continueKept(ctx context.Context, w artifact.Writer, todo []PlanFile) error {
	p.continued = map[string]continued{}
	for _, f := range todo {
		fw, off, ok, err := w.Continue(f.Binding)
		if err != nil {
			return fmt.Errorf("continue %s: %w", f.Path, err)
		}
		if !ok {
			continue
		}
		if !p.r.ProbeRanges(ctx, f.Layer).Served {
			log.G(ctx).WithField("file", f.Path).Info("pull: the registry serves no ranges; the kept part of the file is fetched again")
			if err := w.Drop(f.Path); err != nil {
				return err
			}
			continue
		}
		p.continued[f.Path] = continued{fw, off}
		p.reused.Add(off)
		p.resumedFiles.Add(1)
		p.progress(off)
		log.G(ctx).WithField("file", f.Path).WithField("offset", off).Info("pull: continued from an interrupted pull")
	}
	return nil
}

// checkEntry verifies what the store computed for a file: its sha256
// against the layer digest and, for a weightsnap artifact, the whole entry
// against the pulled index layer (the store's writer checked the bound
// fields already; a writer that computes everything is checked here).
func (p *puller) checkEntry(f PlanFile, got artifact.FileEntry) error {
	if got.SHA256 != f.SHA256 {
		return registry.DigestMismatch(f.Path, digest.NewDigestFromEncoded(digest.SHA256, f.SHA256).String(), digest.NewDigestFromEncoded(digest.SHA256, got.SHA256).String())
	}
	if f.Binding.By == artifact.BindNone {
		return nil
	}
	return artifact.CompareEntry(f.Binding.Want, got)
}

// layerError makes the writer's mismatch a digest mismatch of the layer
// (errdefs.ErrDataLoss): the registry or the path corrupted the blob. A
// sha256 is the layer digest's; a BLAKE3 is the index layer's, which the
// manifest pins to the layer as firmly.
func layerError(f PlanFile, err error) error {
	var em *artifact.EntryMismatchError
	switch {
	case !errors.As(err, &em):
		return err
	case em.Field == "sha256" && em.Tensor == "":
		return registry.DigestMismatch(f.Path, f.Layer.Digest.String(), digest.NewDigestFromEncoded(digest.SHA256, em.Got).String())
	case em.Field == "blake3":
		return fmt.Errorf("layer %s: %w", f.Layer.Digest, err)
	}
	return err
}
