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

func (f *fakeTrust) Keep(_ context.Context, d *store.Domain, id artifact.ID, _ artifact.Producer) error {
	l, err := d.Lookup(context.Background(), id, "")
	if err == nil {
		l.Close()
	}
	f.held = append(f.held, err == nil)
	f.kept.Add(1)
	f.ok[id] = true
	return nil
}

// TestResolveTrust: under a trust policy, a weight peer and a local
// producer are skipped for a reference the policy wants signed (and used
// for another); a remote provider's verification is kept before
// publication; a store hit the policy does not accept goes on to the
// remote sources; a provider's policy refusal is a policy failure, in
// preferred mode too, never the canonical source.
func TestResolveTrust(t *testing.T) {
	ctx := context.Background()
	dir := storetest.SettledCheckpoint(t, 256<<10, 2)
	id := identityOf(t, producers.Passthrough{}, dir)
	digest, _ := id.ID()
	peerCalls := &atomic.Int32{}
	peer := failProvider("peer", errdefs.ErrNotFound, peerCalls)
	located := &bothProvider{digestProvider{id: id, src: mustScan(t, dir)}}
	tr := &fakeTrust{ok: map[artifact.ID]bool{}}
	var locErr error
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Preferred, Trust: tr,
		Peers: []resolve.Provider{peer},
		Locate: func(context.Context, string) (resolve.Provider, error) {
			if locErr != nil {
				return failProvider("registry", locErr, &atomic.Int32{}), nil
			}
			return located, nil
		}})
	ref := "signed/x@sha256:" + strings.Repeat("2", 64)

	// The policy refuses what the registry offers: a policy failure,
	// with a canonical source to fall back to, in preferred mode.
	locErr = fmt.Errorf("artifact %s: %w", ref, refusal{"signed"})
	res, err := rt.Resolve(ctx, resolve.Request{Identity: &id, Artifact: ref, Source: dir})
	var f *resolve.Failure
	if !errors.As(err, &f) || f.Kind != resolve.KindPolicy || !errdefs.IsPermissionDenied(err) || peerCalls.Load() != 0 {
		t.Fatalf("refused: %v (peer asked %d times), want a policy failure", err, peerCalls.Load())
	}
	res.Close()

	locErr = nil
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: ref})
	if err != nil || res.Report.Outcome != resolve.OutcomeFetched || tr.kept.Load() != 1 || tr.held[0] || peerCalls.Load() != 0 {
		t.Fatalf("signed: %v %+v, kept %d, peer asked %d times", err, res.Report, tr.kept.Load(), peerCalls.Load())
	}
	if s := res.Report.Steps; !strings.Contains(fmt.Sprint(s), "skipped") {
		t.Fatalf("steps %+v: want the peer skipped", s)
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
	if !errors.As(err, &f) || f.Kind != resolve.KindPolicy {
		t.Fatalf("refused hit, refused by the registry: %v", err)
	}
	res.Close()

	// Another reference: the peer is asked.
	res, err = rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: "free/x@sha256:" + strings.Repeat("2", 64)})
	if err != nil || peerCalls.Load() != 0 || res.Report.Outcome != resolve.OutcomeHit {
		t.Fatalf("free hit: %v %+v", err, res.Report)
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

// bothProvider fetches by digest or by full identity, as the registry's
// artifact provider does.
type bothProvider struct{ digestProvider }

func (p *bothProvider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	id, err := identity.ID()
	if err != nil {
		return nil, err
	}
	_, prod, err := p.ProducerForID(ctx, id)
	return prod, err
}
