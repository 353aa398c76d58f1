package producers

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
)

// TPSplitName is the tp-split producer's name.
const TPSplitName = "tp-split"

const (
	tpSplitVersion = "1"
	tpSplitImpl    = "weightsnap tp-split v1: each safetensors shard rewritten under its own name, tensors in source order, " +
		"each split for rank r of N by artifact/tpsplit (column: dim 0, row: last dim, padding zero-filled at the end), " +
		"F32/F16/BF16 tensors cast with artifact/cast (round to nearest even) when a dtype is asked for, " +
		"*.safetensors.index.json total_size rewritten, other files verbatim"
)

// TPSplitRef is the tp-split producer's identity fields.
func TPSplitRef() artifact.ProducerRef { return RefOf(TPSplitName, tpSplitVersion, tpSplitImpl) }

// TPSplit is the Local of the tp-split producer: the shard of tensor-parallel
// rank Rank of Size, laid out by a layout spec, optionally cast to DType.
//
// Its identity's layout is {Name: LayoutName(Spec), TPSize: Size, TPRank:
// Rank}: the layout name carries the spec's name and the hex of its
// fingerprint (tpsplit.Spec.Fingerprint), so two specs that differ in any
// rule make different artifacts, while formatting and comments in the spec
// file do not. The representation is DType, or "source" when DType is empty.
//
// With Layout LayoutVLLMSharded it writes vLLM's sharded-state layout
// instead (see vllm.go): no Spec, the rules are vLLM's for the checkpoint's
// architecture, and the identity's layout name is VLLMLayoutName(MaxPartSize).
type TPSplit struct {
	Spec  *tpsplit.Spec
	Size  int
	Rank  int
	DType string // "" or "source": keep each tensor's dtype; else F32, F16 or BF16
	// Layout is LayoutWeightsnap ("" too) or LayoutVLLMSharded.
	Layout string
	// MaxPartSize is the vLLM layout's part file bound in bytes; 0 means
	// tpsplit.VLLMDefaultMaxPartSize.
	MaxPartSize int64
}

// Layouts of the tp-split producer.
const (
	// LayoutWeightsnap is ours: each source shard rewritten under its own
	// name, split by a layout spec.
	LayoutWeightsnap = "weightsnap"
	// LayoutVLLMSharded is vLLM's sharded-state layout
	// (model-rank-{rank}-part-{part}.safetensors, vLLM's parameter names).
	LayoutVLLMSharded = "vllm-sharded"
)

// LayoutName is the layout name of a tp-split identity: "<spec name>+<hex of
// the spec fingerprint>".
func LayoutName(spec *tpsplit.Spec) (string, error) {
	if !specNameRE.MatchString(spec.Name) {
		return "", fmt.Errorf("layout spec name %q: want up to 56 of [A-Za-z0-9._-], starting with a letter or digit: %w", spec.Name, errdefs.ErrInvalidArgument)
	}
	return spec.Name + "+" + strings.TrimPrefix(spec.Fingerprint(), "sha256:"), nil
}

var specNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,55}$`)

// Name implements Local.
func (p *TPSplit) Name() string { return TPSplitName }

// Phase implements Local.
func (p *TPSplit) Phase() Phase { return PreLoadSafe }

// Ref implements Local.
func (p *TPSplit) Ref() artifact.ProducerRef {
	if p.vllm() {
		return VLLMShardedRef()
	}
	return TPSplitRef()
}

func (p *TPSplit) vllm() bool { return p.Layout == LayoutVLLMSharded }

func (p *TPSplit) check() error {
	switch {
	case p.Layout != "" && p.Layout != LayoutWeightsnap && !p.vllm():
		return fmt.Errorf("tp-split: layout %q: want %q or %q: %w", p.Layout, LayoutWeightsnap, LayoutVLLMSharded, errdefs.ErrInvalidArgument)
	case p.vllm() && p.Spec != nil:
		return fmt.Errorf("tp-split: a layout spec does not apply to the %s layout (its rules are vLLM's): %w", LayoutVLLMSharded, errdefs.ErrInvalidArgument)
	case !p.vllm() && p.Spec == nil:
		return fmt.Errorf("tp-split: no layout spec: %w", errdefs.ErrInvalidArgument)
	case !p.vllm() && p.MaxPartSize != 0:
		return fmt.Errorf("tp-split: a max part size applies only to the %s layout: %w", LayoutVLLMSharded, errdefs.ErrInvalidArgument)
	case p.MaxPartSize < 0:
		return fmt.Errorf("tp-split: max part size %d is negative: %w", p.MaxPartSize, errdefs.ErrInvalidArgument)
	case p.Size < 1 || p.Rank < 0 || p.Rank >= p.Size:
		return fmt.Errorf("tp-split: rank %d of tp size %d: %w", p.Rank, p.Size, errdefs.ErrInvalidArgument)
	}
	return checkTargetDType(p.DType, true)
}

// Identity implements Local.
func (p *TPSplit) Identity(src *artifact.SourceDir, t Target) (artifact.Identity, error) {
	if err := p.check(); err != nil {
		return artifact.Identity{}, err
	}
	var name string
	var err error
	if p.vllm() {
		// Refuse what vLLM's rules do not cover before anything is built.
		if _, err = readLlamaConfig(src, p.Size); err != nil {
			return artifact.Identity{}, err
		}
		name = VLLMLayoutName(p.maxPartSize())
	} else if name, err = LayoutName(p.Spec); err != nil {
		return artifact.Identity{}, err
	}
	dt := p.DType
	if dt == "" {
		dt = "source"
	}
	id := artifact.Identity{
		Schema:         artifact.IdentitySchema,
		Model:          model(src, t),
		Component:      component(t.Component),
		Representation: artifact.Representation{DType: dt},
		Layout:         artifact.Layout{Name: name, TPSize: p.Size, TPRank: p.Rank},
		Producer:       p.Ref(),
	}
	return id, id.Validate()
}

// Producer implements Local.
func (p *TPSplit) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.vllm() {
		return &vllmSharded{split: p, src: src}, nil
	}
	return &transform{name: TPSplitName, src: src, tensor: p.plan}, nil
}

func (p *TPSplit) plan(ti artifact.TensorInfo) (*tensorPlan, error) {
	sp, err := p.Spec.Plan(ti.Name, ti.DType, ti.Shape, p.Size)
	if err != nil {
		return nil, err
	}
	tp := &tensorPlan{src: ti, outDType: ti.DType, outShape: sp.ShardShape(p.Rank)}
	if err := castPlan(tp, ti, p.DType); err != nil {
		return nil, err
	}
	if sp.Replicated {
		n := ti.End - ti.Begin
		tp.outLen = n
		tp.walk = func(visit func(segment) error) error {
			if n == 0 {
				return nil
			}
			return visit(segment{off: 0, n: n})
		}
		return tp, nil
	}
	dt, _ := artifact.LookupDType(ti.DType)
	esize := int64(dt.Bits / 8)
	outer, rowLen := int64(1), esize
	for _, d := range sp.Shape[:sp.Dim] {
		outer *= d
	}
	for _, d := range sp.Shape[sp.Dim+1:] {
		rowLen *= d
	}
	shard := sp.PaddedSize / int64(sp.TPSize)
	start := int64(p.Rank) * shard
	have := max(0, min(shard, sp.Size-start)) // indices of this shard that hold data
	run, pad := have*rowLen, (shard-have)*rowLen
	stride := sp.Size * rowLen
	tp.outLen = outer * (run + pad)
	if want := sp.ShardLen(p.Rank); tp.outLen != want {
		return nil, fmt.Errorf("tp-split: tensor %q: %d bytes planned, tpsplit says %d: %w", ti.Name, tp.outLen, want, errdefs.ErrInternal)
	}
	tp.walk = func(visit func(segment) error) error {
		for o := range outer {
			if run > 0 {
				if err := visit(segment{off: o*stride + start*rowLen, n: run}); err != nil {
					return err
				}
			}
			if pad > 0 {
				if err := visit(segment{n: pad, zero: true}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return tp, nil
}

// checkTargetDType accepts the dtypes a producer can cast to.
func checkTargetDType(dt string, keepOK bool) error {
	if keepOK && (dt == "" || dt == "source") {
		return nil
	}
	if cast.ElemSize(dt) == 0 {
		return fmt.Errorf("cast to %q: want F32, F16 or BF16: %w", dt, errdefs.ErrNotImplemented)
	}
	return nil
}

// castPlan sets a tensor's conversion to target: F32, F16 and BF16 tensors
// are converted; integer and boolean tensors are kept; any other floating
// dtype is an unsupported conversion.
func castPlan(tp *tensorPlan, ti artifact.TensorInfo, target string) error {
	if target == "" || target == "source" || ti.DType == target {
		return nil
	}
	if cast.Supported(ti.DType, target) {
		tp.from, tp.to, tp.outDType = ti.DType, target, target
		return nil
	}
	if strings.HasPrefix(ti.DType, "F") || strings.HasPrefix(ti.DType, "C") {
		return fmt.Errorf("tensor %q: cast %s -> %s is not supported: %w", ti.Name, ti.DType, target, errdefs.ErrNotImplemented)
	}
	return nil
}
