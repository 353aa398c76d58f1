package resolve

import (
	"context"

	"github.com/weightsnap/weightsnap/artifact"
)

// Provider is a remote source of exact artifacts: a weight peer or an OCI
// registry. Resolution asks each configured provider in order (peer, then
// registry) after the local store misses.
//
// Provider uses only artifact and standard types, so package oci and package
// peer implement it without importing resolve. A provider never writes into
// the store itself: it returns a producer, which resolution runs under the
// store's build lock (store.Domain.Materialise) with the store-scoped
// writer; a producer that moves bytes says how (store.TransferReporter) and
// the report's step records it.
// That producer writes every payload file through the writer (sequential
// Write where it can, so the store hashes while it writes; WriteAt for
// multi-stream fetches), verifies each file against the remote digests, and
// may reuse files kept from an interrupted build (artifact.Resumer).
//
// Errors, from Producer or from the producer's Produce, are classified
// without any resolve type:
//   - errdefs.ErrNotFound: a clean miss (the provider does not have the identity);
//   - errdefs.ErrConflict: an identity collision (the remote artifact under
//     that name or digest carries another identity); always visible;
//   - errdefs.ErrNotImplemented: an unsupported capability; always visible;
//   - anything else is a remote failure, retryable when the error (or one it
//     wraps) has a Retryable() bool method that says so, or wraps
//     errdefs.ErrUnavailable.
type Provider interface {
	// Name names the provider in reports: "peer", "registry".
	Name() string
	// Producer returns the producer that fetches the artifact of identity,
	// or a clean miss. It should answer a miss without transferring payload.
	Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error)
}

// ProviderFunc adapts a function to a Provider.
type ProviderFunc struct {
	ProviderName string
	Fn           func(ctx context.Context, identity artifact.Identity) (artifact.Producer, error)
}

// Name implements Provider.
func (p ProviderFunc) Name() string { return p.ProviderName }

// Producer implements Provider.
func (p ProviderFunc) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	return p.Fn(ctx, identity)
}

// IDProvider is a provider that can fetch an artifact knowing only its
// identity digest (sha256:<hex>), such as the registry artifact a weight
// image's pointer names by manifest digest. It returns the identity the
// remote artifact carries and the producer that fetches it; resolution
// checks that identity's digest is the one asked for. Errors are classified
// as for Producer.
type IDProvider interface {
	Provider
	ProducerForID(ctx context.Context, id artifact.ID) (artifact.Identity, artifact.Producer, error)
}
