package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// digestProvider stands in for the registry artifact a pointer names: it
// knows the identity behind a digest and produces it from a source directory.
type digestProvider struct {
	id    artifact.Identity
	src   *artifact.SourceDir
	calls atomic.Int32
}

func (p *digestProvider) Name() string { return "registry" }

func (p *digestProvider) Producer(context.Context, artifact.Identity) (artifact.Producer, error) {
	return nil, errors.New("called with a full identity")
}

func (p *digestProvider) ProducerForID(context.Context, artifact.ID) (artifact.Identity, artifact.Producer, error) {
	p.calls.Add(1)
	prod, err := producers.Passthrough{}.Producer(p.src)
	return p.id, prod, err
}

// TestResolveByDigest: a request that knows only the identity digest and
// the artifact's reference is served by the store, or by the located
// provider, which must hand over exactly that identity.
func TestResolveByDigest(t *testing.T) {
	dir := storetest.SettledCheckpoint(t, 256<<10, 2)
	src := mustScan(t, dir)
	id := identityOf(t, producers.Passthrough{}, dir)
	digest, _ := id.ID()
	other := id
	other.Component = "other"
	const ref = "reg.example/models/x@sha256:2222222222222222222222222222222222222222222222222222222222222222"

	good := &digestProvider{id: id, src: src}
	var located []string
	root := filepath.Join(t.TempDir(), "root")
	rt := newRuntime(t, resolve.Config{Root: root, Mode: resolve.Required,
		Locate: func(_ context.Context, r string) (resolve.Provider, error) {
			located = append(located, r)
			if strings.HasPrefix(r, "evil.example/") {
				return nil, fmt.Errorf("evil.example is not a configured registry: %w", errdefs.ErrPermissionDenied)
			}
			if strings.HasPrefix(r, "liar.example/") {
				return &digestProvider{id: other, src: src}, nil
			}
			return good, nil
		}})
	resolveDigest := func(d artifact.ID, art string) (*resolve.Resolution, error) {
		return rt.Resolve(context.Background(), resolve.Request{ID: d, Artifact: art})
	}

	// Not in the store, no reference: a clean miss, visible in required mode.
	res, err := resolveDigest(digest, "")
	if !errdefs.IsNotFound(err) || res.Report.Failure.Kind != resolve.KindMiss {
		t.Fatalf("miss: %v", err)
	}
	// A host that may not be used: a policy failure, and nothing fetched.
	res, err = resolveDigest(digest, "evil.example/x@sha256:"+strings.Repeat("3", 64))
	if res.Report.Failure == nil || res.Report.Failure.Kind != resolve.KindPolicy || !strings.Contains(err.Error(), "not a configured registry") {
		t.Fatalf("policy: %v", err)
	}
	// A provider that hands over another identity: a collision.
	res, err = resolveDigest(digest, "liar.example/x@sha256:"+strings.Repeat("3", 64))
	if !errdefs.IsConflict(err) || res.Report.Failure.Kind != resolve.KindIdentityCollision {
		t.Fatalf("collision: %v", err)
	}
	// The located provider fetches it.
	res, err = resolveDigest(digest, ref)
	if err != nil || res.Report.Outcome != resolve.OutcomeFetched || res.Report.ID != digest || good.calls.Load() != 1 {
		t.Fatalf("fetch: %v %+v", err, res.Report)
	}
	if d, _ := res.Lease.Identity().ID(); d != digest {
		t.Fatalf("leased %s", d)
	}
	res.Close()
	// Then the store has it: a hit, the provider not asked again.
	res, err = resolveDigest(digest, ref)
	if err != nil || res.Report.Outcome != resolve.OutcomeHit || good.calls.Load() != 1 {
		t.Fatalf("hit: %v %+v", err, res.Report)
	}
	res.Close()
	if strings.Join(located, ",") != "evil.example/x@sha256:"+strings.Repeat("3", 64)+",liar.example/x@sha256:"+strings.Repeat("3", 64)+","+ref {
		t.Fatalf("located %v", located)
	}
	// A provider that needs the full identity is skipped, not called.
	calls := &atomic.Int32{}
	rt2 := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root2"), Mode: resolve.Required,
		Providers: []resolve.Provider{failProvider("peer", errors.New("must not be called"), calls)}})
	res, err = rt2.Resolve(context.Background(), resolve.Request{ID: digest})
	res.Close()
	if !errdefs.IsNotFound(err) || calls.Load() != 0 {
		t.Fatalf("full-identity provider: %v, %d calls", err, calls.Load())
	}
	// A malformed digest is an invalid request.
	if _, err := artifact.ParseID("sha256:abc"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("bad digest: %v", err)
	}
}

// peerProvider stands in for the weight peers: it fetches by digest or by
// full identity, and says how it moved the artifact.
type peerProvider struct{ digestProvider }

func (p *peerProvider) Name() string { return "peer" }

func (p *peerProvider) ProducerForID(ctx context.Context, want artifact.ID) (artifact.Identity, artifact.Producer, error) {
	id, prod, err := p.digestProvider.ProducerForID(ctx, want)
	return id, transferring{prod}, err
}

type transferring struct{ artifact.Producer }

func (transferring) Transfer() store.Transfer {
	return store.Transfer{Endpoint: "10.0.0.7:7420", Mode: "tcp", Rails: 4, Fetched: 42}
}

// TestResolvePeersFirst: the weight peers are asked before the registry a
// pointer names, and the report's step says how the peer moved the bytes.
func TestResolvePeersFirst(t *testing.T) {
	dir := storetest.SettledCheckpoint(t, 256<<10, 2)
	id := identityOf(t, producers.Passthrough{}, dir)
	digest, _ := id.ID()
	p := &peerProvider{digestProvider{id: id, src: mustScan(t, dir)}}
	located := &digestProvider{id: id, src: mustScan(t, dir)}
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required,
		Peers:  []resolve.Provider{p},
		Locate: func(context.Context, string) (resolve.Provider, error) { return located, nil }})
	res, err := rt.Resolve(context.Background(), resolve.Request{ID: digest,
		Artifact: "reg.example/models/x@sha256:" + strings.Repeat("2", 64)})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	last := res.Report.Steps[len(res.Report.Steps)-1]
	if res.Report.Source != "peer" || located.calls.Load() != 0 || last.Transfer == nil ||
		last.Transfer.Endpoint != "10.0.0.7:7420" || last.Transfer.Mode != "tcp" || last.Transfer.Rails != 4 || last.Transfer.Fetched != 42 {
		t.Fatalf("report %+v, step %+v", res.Report, last)
	}
}
