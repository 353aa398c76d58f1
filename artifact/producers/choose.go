package producers

import (
	"fmt"
	"os"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
)

// Choice is what a caller asks of a local producer: a tensor-parallel
// split, a cast, or the checkpoint as it is.
type Choice struct {
	TPSize, TPRank int
	// LayoutSpec is the path of tp-split's layout spec (TOML).
	LayoutSpec string
	// DType is the cast's dtype; "" or "source" keeps the source's.
	DType string
	// Layout is tp-split's output layout: "" or LayoutWeightsnap (by
	// LayoutSpec), or LayoutVLLMSharded (vLLM's rules, no spec; TP size 1
	// when TPSize is 0).
	Layout string
	// MaxPartSize bounds the vLLM layout's part files (0: 5 GiB).
	MaxPartSize int64
}

// Choose picks the local producer: tp-split with a TP size, cast with a
// dtype, passthrough otherwise; or, given an identity and no such choice,
// the producer the identity names with its dtype and TP coordinates. It
// returns nil, nil for an identity no built-in producer makes (the store and
// the canonical source only).
func Choose(c Choice, id *artifact.Identity) (Local, error) {
	name := artifact.PassthroughName
	switch {
	case c.TPSize > 0 || c.Layout == LayoutVLLMSharded:
		name = TPSplitName
	case c.DType != "" && c.DType != "source":
		name = CastName
	case id != nil:
		name = id.Producer.Name
		if c.DType == "" {
			c.DType = id.Representation.DType
		}
		if c.TPSize == 0 {
			c.TPSize, c.TPRank = id.Layout.TPSize, id.Layout.TPRank
		}
		if bound, ok := ParseVLLMLayoutName(id.Layout.Name); ok && name == TPSplitName && c.Layout == "" {
			c.Layout = LayoutVLLMSharded
			if c.MaxPartSize == 0 {
				c.MaxPartSize = bound
			}
		}
	}
	switch name {
	case TPSplitName:
		if c.Layout == LayoutVLLMSharded {
			if c.LayoutSpec != "" {
				return nil, fmt.Errorf("tp-split: a layout spec does not apply to the %s layout: %w", LayoutVLLMSharded, errdefs.ErrInvalidArgument)
			}
			s := &TPSplit{Size: max(c.TPSize, 1), Rank: c.TPRank, DType: c.DType, Layout: c.Layout, MaxPartSize: c.MaxPartSize}
			return s, s.check()
		}
		if c.Layout != "" && c.Layout != LayoutWeightsnap {
			return nil, fmt.Errorf("tp-split: layout %q: want %q or %q: %w", c.Layout, LayoutWeightsnap, LayoutVLLMSharded, errdefs.ErrInvalidArgument)
		}
		if c.MaxPartSize != 0 {
			return nil, fmt.Errorf("tp-split: a max part size applies only to the %s layout: %w", LayoutVLLMSharded, errdefs.ErrInvalidArgument)
		}
		if c.LayoutSpec == "" {
			return nil, fmt.Errorf("tp-split needs a layout spec: %w", errdefs.ErrInvalidArgument)
		}
		raw, err := os.ReadFile(c.LayoutSpec)
		if err != nil {
			return nil, fmt.Errorf("layout spec: %w", err)
		}
		spec, err := tpsplit.ParseSpec(raw)
		if err != nil {
			return nil, err
		}
		return &TPSplit{Spec: spec, Size: c.TPSize, Rank: c.TPRank, DType: c.DType}, nil
	case CastName:
		return &Cast{DType: c.DType}, nil
	case artifact.PassthroughName:
		return Passthrough{}, nil
	}
	return nil, nil
}
