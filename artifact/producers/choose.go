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
}

// Choose picks the local producer: tp-split with a TP size, cast with a
// dtype, passthrough otherwise; or, given an identity and no such choice,
// the producer the identity names with its dtype and TP coordinates. It
// returns nil, nil for an identity no built-in producer makes (the store and
// the canonical source only).
func Choose(c Choice, id *artifact.Identity) (Local, error) {
	name := artifact.PassthroughName
	switch {
	case c.TPSize > 0:
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
	}
	switch name {
	case TPSplitName:
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
