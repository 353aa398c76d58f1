package producers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// TensorMapName is the tensor-map producer's name.
const TensorMapName = "tensor-map"

const (
	tensorMapVersion = "1"
	tensorMapImpl    = "weightsnap tensor-map v1: tensors held in memory after a load, written in the given order " +
		"into one safetensors file with artifact.WriteSafetensors"
)

// TensorMapRef is the tensor-map producer's identity fields.
func TensorMapRef() artifact.ProducerRef {
	return ref(TensorMapName, tensorMapVersion, tensorMapImpl)
}

// TensorMap is a POST_LOAD_ONLY producer: it publishes tensors a loaded
// model holds in memory (for instance weights an engine transformed while
// loading) as one safetensors file. It runs only through post-load
// publication, never during resolution.
type TensorMap struct {
	Path     string // payload path; "" means model.safetensors
	Tensors  []artifact.WriteTensor
	Metadata map[string]string
}

// Name implements artifact.Producer.
func (p *TensorMap) Name() string { return TensorMapName }

// Phase implements PhasedProducer.
func (p *TensorMap) Phase() Phase { return PostLoadOnly }

// Produce implements artifact.Producer.
func (p *TensorMap) Produce(ctx context.Context, w artifact.Writer) error {
	path := p.Path
	if path == "" {
		path = "model.safetensors"
	}
	specs := make([]artifact.TensorSpec, len(p.Tensors))
	for i, t := range p.Tensors {
		specs[i] = artifact.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	_, _, total, err := artifact.PlanSafetensors(specs, p.Metadata)
	if err != nil {
		return err
	}
	out, err := w.Create(path, total)
	if err != nil {
		return err
	}
	if _, err := artifact.WriteSafetensors(onlyWriter{out}, p.Tensors, p.Metadata); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return out.Close()
}

// MapModel is an in-memory model: the tensors it expects and, once
// restored, their bytes. It is the model of the reference restorer.
type MapModel struct {
	Want    []artifact.TensorSpec
	Tensors map[string][]byte
	state   artifact.Hydration
}

// NewMapModel returns an empty model expecting the given tensors.
func NewMapModel(want []artifact.TensorSpec) *MapModel {
	return &MapModel{Want: want, state: artifact.HydrationEmpty}
}

// Hydration implements artifact.Hydratable.
func (m *MapModel) Hydration() artifact.Hydration {
	if m.state == "" {
		return artifact.HydrationEmpty
	}
	return m.state
}

// MarkPartial implements artifact.Hydratable.
func (m *MapModel) MarkPartial() { m.state = artifact.HydrationPartial }

// MarkComplete records a complete load (for loaders other than a restorer,
// such as a canonical fallback).
func (m *MapModel) MarkComplete() { m.state = artifact.HydrationComplete }

// MapRestorer is the reference restorer: it copies a leased artifact's
// tensors into a MapModel.
type MapRestorer struct {
	// FailAfter, when positive, makes Commit fail after that many tensors
	// were restored (fault injection for tests).
	FailAfter int
}

// MapRestorerSchema is the restorer schema MapRestorer reads.
const MapRestorerSchema = 1

// Name implements artifact.Restorer.
func (r MapRestorer) Name() string { return "map" }

// Schema implements artifact.Restorer.
func (r MapRestorer) Schema() int { return MapRestorerSchema }

func (r MapRestorer) fail(phase, tensor string, class error, format string, args ...any) error {
	return &artifact.RestoreError{Restorer: r.Name(), Phase: phase, Tensor: tensor, Reason: fmt.Sprintf(format, args...), Err: class}
}

// PlanRestore implements artifact.Restorer: it checks the model is empty
// and every tensor it wants is in the lease with its dtype and shape, and
// keeps views of them. It changes nothing.
func (r MapRestorer) PlanRestore(ctx context.Context, lease artifact.LeaseView, m *MapModel) (artifact.RestorePlan, error) {
	if h := m.Hydration(); h != artifact.HydrationEmpty {
		return nil, r.fail("plan", "", errdefs.ErrFailedPrecondition, "model is %s, not empty: restore into a fresh model", h)
	}
	if s := lease.Identity().Producer.RestorerSchema; s != r.Schema() {
		return nil, r.fail("plan", "", errdefs.ErrNotImplemented, "artifact restorer schema %d, this restorer reads %d", s, r.Schema())
	}
	p := &mapPlan{r: r, m: m, views: make([][]byte, len(m.Want))}
	for i, want := range m.Want {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		view, e, err := lease.Tensor(want.Name)
		if err != nil {
			return nil, r.fail("plan", want.Name, errdefs.ErrNotFound, "%v", err)
		}
		if e.DType != want.DType || !slices.Equal(e.Shape, want.Shape) {
			return nil, r.fail("plan", want.Name, errdefs.ErrInvalidArgument, "artifact has %s%v, model wants %s%v", e.DType, e.Shape, want.DType, want.Shape)
		}
		p.views[i] = view
	}
	return p, nil
}

type mapPlan struct {
	r         MapRestorer
	m         *MapModel
	views     [][]byte
	committed bool
}

// Commit copies the planned tensors into the model, once.
func (p *mapPlan) Commit(ctx context.Context) error {
	if p.committed {
		return artifact.ErrCommitted
	}
	p.committed = true
	if p.m.Tensors == nil {
		p.m.Tensors = make(map[string][]byte, len(p.views))
	}
	for i, v := range p.views {
		name := p.m.Want[i].Name
		if err := ctx.Err(); err != nil {
			return p.partial(name, err)
		}
		if p.r.FailAfter > 0 && i == p.r.FailAfter {
			return p.partial(name, p.r.fail("commit", name, errdefs.ErrAborted, "injected failure after %d tensors", i))
		}
		p.m.Tensors[name] = append([]byte(nil), v...)
	}
	p.m.state = artifact.HydrationComplete
	return nil
}

// partial marks the model partially hydrated: a failed commit leaves a
// model nobody may use, whatever it got to write.
func (p *mapPlan) partial(tensor string, err error) error {
	p.m.MarkPartial()
	if re := (*artifact.RestoreError)(nil); !errors.As(err, &re) {
		err = p.r.fail("commit", tensor, err, "%v", err)
	}
	return err
}
