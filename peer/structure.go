package peer

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// Structure is the shape a fleet takes to carry an artifact from the one
// node that takes the registry to every other: "chain" or "forest".
type Structure string

// Structures.
const (
	// StructureChain: a node that misses lists every peer and fetches
	// from a holder or from a builder with a free child slot
	// (max_children), so with one child a node the fleet is a chain.
	StructureChain Structure = "chain"
	// StructureForest: a node that misses places itself in the striped
	// forest of the member list (peer/stripes) and fetches each stripe's
	// pieces from its source in that stripe, one session a stripe.
	StructureForest Structure = "forest"
)

// ParseStructure parses a structure's name; "" is the chain.
func ParseStructure(s string) (Structure, error) {
	switch Structure(s) {
	case "", StructureChain:
		return StructureChain, nil
	case StructureForest:
		return StructureForest, nil
	}
	return "", fmt.Errorf("peer structure %q: want %q or %q: %w", s, StructureChain, StructureForest, errdefs.ErrInvalidArgument)
}
