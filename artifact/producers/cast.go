package producers

import (
	"github.com/weightsnap/weightsnap/artifact"
)

// CastName is the cast producer's name.
const CastName = "cast"

const (
	castVersion = "1"
	castImpl    = "weightsnap cast v1: each safetensors shard rewritten under its own name, tensors in source order, " +
		"F32/F16/BF16 tensors converted with artifact/cast (round to nearest even; subnormals, signed zeros, " +
		"infinities exact; NaN sign and high payload kept, quieted), integer and boolean tensors kept, " +
		"*.safetensors.index.json total_size rewritten, other files verbatim"
)

// CastRef is the cast producer's identity fields.
func CastRef() artifact.ProducerRef { return ref(CastName, castVersion, castImpl) }

// Cast is the Local of the cast producer: every F32, F16 and BF16 tensor
// converted to DType. Its identity keeps the source layout and names DType
// as the representation.
type Cast struct {
	DType string // F32, F16 or BF16
}

// Name implements Local.
func (p *Cast) Name() string { return CastName }

// Phase implements Local.
func (p *Cast) Phase() Phase { return PreLoadSafe }

// Ref implements Local.
func (p *Cast) Ref() artifact.ProducerRef { return CastRef() }

// Identity implements Local.
func (p *Cast) Identity(src *artifact.SourceDir, t Target) (artifact.Identity, error) {
	if err := checkTargetDType(p.DType, false); err != nil {
		return artifact.Identity{}, err
	}
	id := artifact.Identity{
		Schema:         artifact.IdentitySchema,
		Model:          model(src, t),
		Component:      component(t.Component),
		Representation: artifact.Representation{DType: p.DType},
		Layout:         artifact.Layout{Name: "source"},
		Producer:       p.Ref(),
	}
	return id, id.Validate()
}

// Producer implements Local.
func (p *Cast) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	if err := checkTargetDType(p.DType, false); err != nil {
		return nil, err
	}
	return &transform{name: CastName, src: src, tensor: p.plan}, nil
}

func (p *Cast) plan(ti artifact.TensorInfo) (*tensorPlan, error) {
	n := ti.End - ti.Begin
	tp := &tensorPlan{src: ti, outDType: ti.DType, outShape: ti.Shape, outLen: n}
	if err := castPlan(tp, ti, p.DType); err != nil {
		return nil, err
	}
	tp.walk = func(visit func(segment) error) error {
		if n == 0 {
			return nil
		}
		return visit(segment{n: n})
	}
	return tp, nil
}
