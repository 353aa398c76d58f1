package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// MapModel is an in-memory model: the tensors it expects and, once
// restored, their bytes. It is the model of the reference restorer.
type MapModel struct {
	Want    []artifact.TensorSpec
	Tensors map[string][]byte
	state   Hydration
}

// NewMapModel returns an empty model expecting the given tensors.
func NewMapModel(want []artifact.TensorSpec) *MapModel {
	return &MapModel{Want: want, state: HydrationEmpty}
}

// Hydration implements Hydratable.
func (m *MapModel) Hydration() Hydration {
	if m.state == "" {
		return HydrationEmpty
	}
	return m.state
}

// MarkPartial implements Hydratable.
func (m *MapModel) MarkPartial() { m.state = HydrationPartial }

// MarkComplete records a complete load (for loaders other than a restorer,
// such as a canonical fallback).
func (m *MapModel) MarkComplete() { m.state = HydrationComplete }

// MapRestorer is the reference restorer: it copies a leased artifact's
// tensors into a MapModel.
type MapRestorer struct {
	// FailAfter, when positive, makes Commit fail after that many tensors
	// were restored (fault injection for tests).
	FailAfter int
}

// MapRestorerSchema is the restorer schema MapRestorer reads.
const MapRestorerSchema = 1

// Name implements Restorer.
func (r MapRestorer) Name() string { return "map" }

// Schema implements Restorer.
func (r MapRestorer) Schema() int { return MapRestorerSchema }

func (r MapRestorer) fail(phase, tensor string, class error, format string, args ...any) error {
	return &RestoreError{Restorer: r.Name(), Phase: phase, Tensor: tensor, Reason: fmt.Sprintf(format, args...), Err: class}
}

// PlanRestore implements Restorer: it checks the model is empty
// and every tensor it wants is in the lease with its dtype and shape, and
// keeps their mapped bytes. It changes nothing.
func (r MapRestorer) PlanRestore(ctx context.Context, lease Leased, m *MapModel) (RestorePlan, error) {
	if h := m.Hydration(); h != HydrationEmpty {
		return nil, r.fail("plan", "", errdefs.ErrFailedPrecondition, "model is %s, not empty: restore into a fresh model", h)
	}
	if s := lease.Identity().Producer.RestorerSchema; s != r.Schema() {
		return nil, r.fail("plan", "", errdefs.ErrNotImplemented, "artifact restorer schema %d, this restorer reads %d", s, r.Schema())
	}
	p := &mapPlan{r: r, m: m, tensors: make([][]byte, len(m.Want))}
	for i, want := range m.Want {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, e, err := lease.Tensor(want.Name)
		if err != nil {
			return nil, r.fail("plan", want.Name, errdefs.ErrNotFound, "%v", err)
		}
		if e.DType != want.DType || !slices.Equal(e.Shape, want.Shape) {
			return nil, r.fail("plan", want.Name, errdefs.ErrInvalidArgument, "artifact has %s%v, model wants %s%v", e.DType, e.Shape, want.DType, want.Shape)
		}
		p.tensors[i] = data
	}
	return p, nil
}

type mapPlan struct {
	r         MapRestorer
	m         *MapModel
	tensors   [][]byte // each wanted tensor's bytes, mapped from the lease
	committed bool
}

// Commit copies the planned tensors into the model, once.
func (p *mapPlan) Commit(ctx context.Context) error {
	if p.committed {
		return ErrCommitted
	}
	p.committed = true
	if p.m.Tensors == nil {
		p.m.Tensors = make(map[string][]byte, len(p.tensors))
	}
	for i, v := range p.tensors {
		name := p.m.Want[i].Name
		if err := ctx.Err(); err != nil {
			return p.partial(name, err)
		}
		if p.r.FailAfter > 0 && i == p.r.FailAfter {
			return p.partial(name, p.r.fail("commit", name, errdefs.ErrAborted, "injected failure after %d tensors", i))
		}
		p.m.Tensors[name] = append([]byte(nil), v...)
	}
	p.m.state = HydrationComplete
	return nil
}

// partial marks the model partially hydrated: a failed commit leaves a
// model nobody may use, whatever it got to write.
func (p *mapPlan) partial(tensor string, err error) error {
	p.m.MarkPartial()
	if re := (*RestoreError)(nil); !errors.As(err, &re) {
		err = p.r.fail("commit", tensor, err, "%v", err)
	}
	return err
}

// The reference restorer and its model.
var (
	_ Restorer[*MapModel] = MapRestorer{}
	_ Hydratable          = (*MapModel)(nil)
)
