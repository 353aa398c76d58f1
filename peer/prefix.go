package peer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// LookupPrefix finds the one artifact the peers list whose identity or
// manifest digest starts with the hex prefix, and returns its identity
// digest. The peers are listed at once, as a source choice lists them
// (passing over the ones remembered as down), and the lookup ends
// listGrace after the first listing that names a match: a prefix is read
// against the peers that answered by then, and one that matches two
// artifacts there is refused.
func (c ClientConfig) LookupPrefix(ctx context.Context, addrs []string, prefix string) (string, error) {
	matches := func(ls *wire.Listing) []string {
		var ids []string
		if ls == nil {
			return nil
		}
		for _, x := range ls.Artifacts {
			md, _ := digest.Parse(x.ManifestDigest)
			if strings.HasPrefix(x.ID.Hex(), prefix) || md.Validate() == nil && strings.HasPrefix(md.Encoded(), prefix) {
				ids = append(ids, x.ID.String())
			}
		}
		return ids
	}
	listings := listPeers(ctx, c, addrs, func(ls []listing) (decided, done bool) {
		return slices.ContainsFunc(ls, func(l listing) bool { return len(matches(l.ls)) > 0 }), false
	})
	found := map[string]bool{}
	var errs []error
	for _, l := range listings {
		if l.err != nil {
			errs = append(errs, l.err)
		}
		for _, id := range matches(l.ls) {
			found[id] = true
		}
	}
	switch {
	case len(found) == 1:
		for id := range found {
			return id, nil
		}
	case len(found) > 1:
		return "", fmt.Errorf("%s is a prefix of %d artifacts the peers hold (%s): give more digits: %w",
			prefix, len(found), strings.Join(slices.Sorted(maps.Keys(found)), ", "), errdefs.ErrInvalidArgument)
	case len(errs) == len(addrs):
		return "", fmt.Errorf("look up %s in the peers' listings: %w", prefix, errors.Join(errs...))
	}
	return "", fmt.Errorf("no peer lists an artifact whose digest starts with %s: %w", prefix, errdefs.ErrNotFound)
}
