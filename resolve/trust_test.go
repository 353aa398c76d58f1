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

// refusal stands in for package trust's Refusal.
type refusal struct{ scope string }

func (r refusal) Error() string      { return "trust policy scope " + r.scope + " refuses it" }
func (r refusal) TrustScope() string { return r.scope }
func (r refusal) Unwrap() error      { return errdefs.ErrPermissionDenied }

// refused says whether err carries a trust policy's refusal, as the exit
// status of a command reads it.
func refused(err error) bool {
	var r interface{ TrustScope() string }
	return errors.As(err, &r)
}

// fakeTrust wants references under "signed/" signed, and accepts a store
// hit only of what it kept.
type fakeTrust struct {
	kept atomic.Int32
	held []bool // whether the store held the artifact at each Keep
	ok   map[artifact.ID]bool
}

func (f *fakeTrust) signed(ref string) bool { return strings.HasPrefix(ref, "signed/") }

func (f *fakeTrust) Hit(_ context.Context, _ *store.Domain, id artifact.ID, ref string) error {
	if f.signed(ref) && !f.ok[id] {
		return refusal{"signed"}
	}
	return nil
}

func (f *fakeTrust) Unsigned(ref string) error {
	if f.signed(ref) {
		return refusal{"signed"}
	}
	return nil
}

// Admit refuses what a source other than the registry ("signed"
// producers) brings for a signed reference.
func (f *fakeTrust) Admit(_ context.Context, d *store.Domain, id artifact.ID, ref string, prod artifact.Producer) error {
	if _, ok := prod.(signedProducer); !ok && f.signed(ref) {
		return refusal{"signed"}
	}
	l, err := d.Lookup(context.Background(), id, "")
	if err == nil {
		l.Close()
	}
	f.held = append(f.held, err == nil)
	f.kept.Add(1)
	f.ok[id] = true
	return nil
}

// TestResolveTrust: under a trust policy, a weight peer that brings no
// accepted signature for a reference the policy wants signed is passed
// over (unsigned: next source, never the canonical one after it) and used
// for another; a remote provider's verification is kept before
// publication; a store hit the policy does not accept goes on to the
// remote sources; a provider's policy refusal is a policy failure, in
// preferred mode too; a local producer is skipped for a signed reference.
func TestResolveTrust(t *testing.T) {
	ctx := context.Background()
	dir := storetest.SettledCheckpoint(t, 256<<10, 2)
	id := identityOf(t, producers.Passthrough{}, dir)
	digest, _ := id.ID()
	peer := &servingProvider{digestProvider: digestProvider{id: id, src: mustScan(t, dir)}, name: "peer"}
	located := &servingProvider{digestProvider: digestProvider{id: id, src: mustScan(t, dir)}, name: "registry", signed: true}
	tr := &fakeTrust{ok: map[artifact.ID]bool{}}
	var locErr error
	runtime := func(root string, locate bool) *resolve.Runtime {
		cfg := resolve.Config{Root: filepath.Join(t.TempDir(), root), Mode: resolve.Preferred, Trust: tr, Peers: []resolve.Provider{peer}}
		if locate {
			cfg.Locate = func(context.Context, string) (resolve.Provider, error) {
				if locErr != nil {
					return failProvider("registry", locErr, &atomic.Int32{}), nil
				}
				return located, nil
			}
		}
		return newRuntime(t, cfg)
	}
	rt := runtime("root", true)
	ref := "signed/x@sha256:" + strings.Repeat("2", 64)
	free := "free/x@sha256:" + strings.Repeat("2", 64)
	peerRefused := func(r *resolve.Report) bool {
		for _, s := range r.Steps {
			if s.Source == "peer" && s.Outcome == resolve.StepFailed && strings.HasPrefix(s.Detail, string(resolve.KindUnsigned)) {
				return true
			}
		}
		return false
	}

	// The policy refuses what the registry offers, and the peer brings no
	// signature: a policy failure, with a canonical source to fall back
	// to, in preferred mode.
	locErr = fmt.Errorf("artifact %s: %w", ref, refusal{"signed"})
	res, err := rt.Resolve(ctx, resolve.Request{Identity: &id, Artifact: ref, Source: dir})
	var f *resolve.Failure
	if !errors.As(err, &f) || f.Kind != resolve.KindPolicy || !errdefs.IsPermissionDenied(err) || !peerRefused(res.Report) {
		t.Fatalf("refused: %v %+v, want a policy failure after the peer's refusal", err, res.Report.Steps)
	}
	res.Close()

	locErr = nil
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref})
	if err != nil || res.Report.Outcome != resolve.OutcomeFetched || res.Report.Source != "registry" || tr.kept.Load() != 1 || tr.held[0] || !peerRefused(res.Report) {
		t.Fatalf("signed: %v %+v, kept %d", err, res.Report, tr.kept.Load())
	}
	res.Close()
	// Kept, it is a hit.
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref})
	if err != nil || res.Report.Outcome != resolve.OutcomeHit || located.calls.Load() != 1 {
		t.Fatalf("hit: %v %+v", err, res.Report)
	}
	res.Close()
	// A hit the policy no longer accepts is verified by the registry again.
	delete(tr.ok, digest)
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref})
	if err != nil || located.calls.Load() != 2 || tr.kept.Load() != 2 {
		t.Fatalf("refused hit: %v %+v, registry asked %d times", err, res.Report, located.calls.Load())
	}
	res.Close()
	// ... and when the registry refuses it now, resolution fails with the
	// policy failure, never the canonical source.
	delete(tr.ok, digest)
	locErr = refusal{"signed"}
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref, Source: dir})
	if !errors.As(err, &f) || f.Kind != resolve.KindPolicy || !refused(err) {
		t.Fatalf("refused hit, refused by the registry: %v", err)
	}
	res.Close()
	// ... and when the registry does not have it, the hit's refusal stays
	// in the failure, which ends on the registry's miss.
	locErr = fmt.Errorf("artifact %s: %w", ref, errdefs.ErrNotFound)
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref})
	if !refused(err) {
		t.Fatalf("refused hit, missing in the registry: %v, want the hit's refusal in it", err)
	}
	res.Close()
	// Another reference: a hit.
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: free})
	if err != nil || res.Report.Outcome != resolve.OutcomeHit {
		t.Fatalf("free hit: %v %+v", err, res.Report)
	}
	res.Close()

	// Peers alone: the signed reference ends on the peer's refusal, not on
	// the canonical source; another reference is fetched from the peer.
	peers := runtime("peers", false)
	res, err = peers.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref, Source: dir})
	if !errors.As(err, &f) || !errdefs.IsPermissionDenied(err) || !refused(err) || res.Report.Outcome != resolve.OutcomeFailed || !peerRefused(res.Report) {
		t.Fatalf("peer only, signed: %v %+v", err, res.Report)
	}
	res.Close()
	res, err = peers.Resolve(ctx, resolve.Request{ID: digest, Artifact: free})
	if err != nil || res.Report.Outcome != resolve.OutcomeFetched || res.Report.Source != "peer" {
		t.Fatalf("peer only, free: %v %+v", err, res.Report)
	}
	res.Close()

	// A local producer: skipped for a signed reference, used for another.
	local := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "local"), Mode: resolve.Required, Trust: tr,
		AllowLocalBuild: true})
	res, err = local.Resolve(ctx, resolve.Request{Artifact: ref, Source: dir, Target: target, Local: producers.Passthrough{}})
	if err == nil || !strings.Contains(fmt.Sprint(res.Report.Steps), "refuses it") {
		t.Fatalf("local build of a signed reference: %v %+v", err, res.Report.Steps)
	}
	res.Close()
	res, err = local.Resolve(ctx, resolve.Request{Artifact: "free/x@sha256:" + strings.Repeat("2", 64), Source: dir, Target: target, Local: producers.Passthrough{}})
	if err != nil || res.Report.Outcome != resolve.OutcomeBuilt {
		t.Fatalf("local build of another reference: %v %+v", err, res.Report)
	}
	res.Close()
}

// servingProvider fetches by digest or by full identity, as the
// registry's artifact provider and the peers do; a signed one's producer
// carries a signature (signedProducer).
type servingProvider struct {
	digestProvider
	name   string
	signed bool
}

func (p *servingProvider) Name() string { return p.name }

func (p *servingProvider) ProducerForID(ctx context.Context, id artifact.ID) (artifact.Identity, artifact.Producer, error) {
	identity, prod, err := p.digestProvider.ProducerForID(ctx, id)
	if err == nil && p.signed {
		prod = signedProducer{prod}
	}
	return identity, prod, err
}

func (p *servingProvider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	id, err := identity.ID()
	if err != nil {
		return nil, err
	}
	_, prod, err := p.ProducerForID(ctx, id)
	return prod, err
}

// signedProducer is a producer whose artifact's signature was verified.
type signedProducer struct{ artifact.Producer }
