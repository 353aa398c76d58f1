package peer

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// Provider is the weight-peer source of resolution: the configured peers,
// asked in order for the exact identity. It implements resolve.Provider and
// resolve.DigestProvider without importing resolve.
type Provider struct {
	// Peers are host:port entries, IP addresses or DNS names with many
	// addresses (see ExpandPeers).
	Peers   []string
	Options FetchOptions
}

// Name implements resolve.Provider.
func (p *Provider) Name() string { return "peer" }

// Producer implements resolve.Provider: it finds the first peer that holds
// the identity and reads its manifest; a clean miss when none does. The
// producer fetches from that peer first, then from the others on failure.
func (p *Provider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	digest, err := identity.ID()
	if err != nil {
		return nil, err
	}
	addrs, err := ExpandPeers(ctx, p.Peers)
	if err != nil {
		return nil, err
	}
	o := p.Options
	o.Tensors = nil
	f, err := newFetcher(ctx, addrs, digest.String(), o, false)
	if err != nil {
		return nil, err // errdefs.ErrNotFound when no peer holds it: a clean miss
	}
	if f.base.IdentityDigest != digest {
		return nil, fmt.Errorf("peer answered %s for %s: %w", f.base.IdentityDigest.Short(), digest.Short(), errdefs.ErrConflict)
	}
	return f, nil
}

// Transfer implements store.TransferReporter: the peer the fetch finished
// with, the data plane, its rails and the bytes fetched and reused.
func (f *fetcher) Transfer() store.Transfer {
	return store.Transfer{Endpoint: f.rep.Peer, Mode: string(f.rep.Mode), Rails: f.rep.Rails, Fetched: f.fetched.Load(),
		Reused: f.reused.Load(), ReusedFiles: f.reusedFiles}
}

// ProducerForDigest implements resolve.DigestProvider: a peer is asked for
// an artifact by its identity digest, and its manifest carries the identity.
func (p *Provider) ProducerForDigest(ctx context.Context, digest artifact.ID) (artifact.Identity, artifact.Producer, error) {
	addrs, err := ExpandPeers(ctx, p.Peers)
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	o := p.Options
	o.Tensors = nil
	f, err := newFetcher(ctx, addrs, digest.String(), o, false)
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	return f.base.Identity, f, nil
}
