package loader

import (
	"context"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
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
	return producers.RefOf(TensorMapName, tensorMapVersion, tensorMapImpl)
}

// TensorMap is a POST_LOAD_ONLY producer: it publishes tensors a loaded
// model holds in memory (for instance weights an engine transformed while
// loading) as one safetensors file. It runs only through post-load
// publication (resolve.Runtime.PublishAfterLoad), never during resolution.
type TensorMap struct {
	Path     string // payload path; "" means model.safetensors
	Tensors  []artifact.WriteTensor
	Metadata map[string]string
}

// Name implements artifact.Producer.
func (p *TensorMap) Name() string { return TensorMapName }

// Phase implements producers.PhasedProducer.
func (p *TensorMap) Phase() producers.Phase { return producers.PostLoadOnly }

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

// onlyWriter hides every method but Write, so the safetensors are written
// in order.
type onlyWriter struct {
	w interface{ Write([]byte) (int, error) }
}

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

var _ producers.PhasedProducer = (*TensorMap)(nil)
