package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// peerAt is the weight-peer source of the given addresses: reaching one
// is bounded by the connect timeout, anything else by an hour, so a
// black-holed peer that cost more than its connect timeout would hang the
// test.
func peerAt(addrs ...string) resolve.Provider {
	return &peer.Provider{Peers: addrs, Options: peer.FetchOptions{Client: peer.ClientConfig{Timeout: time.Hour, ConnectTimeout: 200 * time.Millisecond}}}
}

// registryAt is the registry source of a repository on addr (plain HTTP).
func registryAt(t *testing.T, addr string) resolve.Provider {
	t.Helper()
	r, err := registry.New(context.Background(), addr+"/models/cold", registry.Options{PlainHTTP: true, HostsDir: "", DockerConfig: filepath.Join(t.TempDir(), "config.json")})
	if err != nil {
		t.Fatal(err)
	}
	return &oci.Provider{Repo: r}
}

// serving is a provider that has the artifact: it produces it from src.
func serving(t *testing.T, name, src string, calls *atomic.Int32) resolve.Provider {
	t.Helper()
	s, _, err := artifact.ScanSource(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return resolve.ProviderFunc{ProviderName: name, Fn: func(context.Context, artifact.Identity) (artifact.Producer, error) {
		calls.Add(1)
		return producers.Passthrough{}.Producer(s)
	}}
}

// corrupt is a provider whose transfer fails verification, as a peer's
// unit whose BLAKE3 does not match or a registry blob whose digest does not.
func corrupt(name string) resolve.Provider {
	return resolve.ProviderFunc{ProviderName: name, Fn: func(context.Context, artifact.Identity) (artifact.Producer, error) {
		return artifact.ProducerFunc{ProducerName: name, Fn: func(ctx context.Context, w artifact.Writer) error {
			return fmt.Errorf("unit 0 of model-00001.safetensors: BLAKE3 mismatch: %w", errdefs.ErrDataLoss)
		}}, nil
	}}
}

func onePeer(addr func(testing.TB) string) func(*testing.T) []resolve.Provider {
	return func(t *testing.T) []resolve.Provider { return []resolve.Provider{peerAt(addr(t))} }
}

func servingRegistry(src string) func(*testing.T, *atomic.Int32) []resolve.Provider {
	return func(t *testing.T, calls *atomic.Int32) []resolve.Provider {
		return []resolve.Provider{serving(t, "registry", src, calls)}
	}
}

func deadRegistry(t *testing.T, _ *atomic.Int32) []resolve.Provider {
	return []resolve.Provider{registryAt(t, testenv.ClosedAddr(t))}
}

func corruptPeer(*testing.T) []resolve.Provider { return []resolve.Provider{corrupt("peer")} }

// passedOver are the report's steps that tried a source and passed it
// over, as "source: outcome (reason)".
func passedOver(rep *resolve.Report) []string {
	var out []string
	for _, s := range rep.Steps {
		switch s.Name {
		case resolve.StepLookup, resolve.StepRemote, resolve.StepProduce, resolve.StepCanonical:
		default:
			continue
		}
		if s.Outcome == resolve.StepOK || s.Outcome == resolve.StepHit {
			continue
		}
		src := s.Source
		if src == "" {
			src = "producers"
		}
		out = append(out, src+": "+s.Outcome+" ("+s.Detail+")")
	}
	return out
}

// TestSourcesFailSoft: each source down, alone and together, through the
// real peer client (a closed port, a listener that never answers) and
// the real registry client (a closed port): resolution goes on to the
// next source, and the report says why each was passed over; required
// mode fails only once every source was tried, naming each.
func TestSourcesFailSoft(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 2)
	type outcome struct {
		outcome resolve.Outcome
		source  string
		kind    resolve.Kind // the terminal failure's, when failed
	}
	fetched := outcome{resolve.OutcomeFetched, "registry", ""}
	built := outcome{resolve.OutcomeBuilt, resolve.SourceProducerPrefix + artifact.PassthroughName, ""}
	canonical := outcome{resolve.OutcomeCanonical, resolve.SourceCanonical, ""}
	failed := func(k resolve.Kind) outcome { return outcome{resolve.OutcomeFailed, "", k} }
	downDown := []string{"local: miss", "peer: failed (unreachable: ", "registry: failed (unreachable: "}
	for _, tc := range []struct {
		name      string
		peers     func(t *testing.T) []resolve.Provider
		registry  func(t *testing.T, calls *atomic.Int32) []resolve.Provider
		build     bool
		preferred outcome
		required  outcome
		// passed are the steps that passed a source over, in order, each
		// by the start of its "source: outcome (reason)".
		passed []string
	}{
		{"one peer down", onePeer(testenv.ClosedAddr), servingRegistry(src), false, fetched, fetched,
			[]string{"local: miss", "peer: failed (unreachable: "}},
		{"one peer black-holed", onePeer(testenv.BlackHole), servingRegistry(src), false, fetched, fetched,
			[]string{"local: miss", "peer: failed (unreachable: "}},
		{"every peer down or black-holed", func(t *testing.T) []resolve.Provider {
			return []resolve.Provider{peerAt(testenv.ClosedAddr(t), testenv.BlackHole(t), testenv.ClosedAddr(t))}
		}, servingRegistry(src), false, fetched, fetched, []string{"local: miss", "peer: failed (unreachable: "}},
		{"registry down, local build", nil, deadRegistry, true, built, built,
			[]string{"local: miss", "registry: failed (unreachable: "}},
		{"peer and registry down, local build", onePeer(testenv.ClosedAddr), deadRegistry, true, built, built, downDown},
		{"peer and registry down", onePeer(testenv.ClosedAddr), deadRegistry, false, canonical, failed(resolve.KindUnreachable),
			append(downDown, "producers: skipped (allow_local_build is off)")},
		{"peer served bad bytes", corruptPeer, servingRegistry(src), false, fetched, fetched,
			[]string{"local: miss", "peer: failed (integrity: "}},
		{"peer served bad bytes, registry down, local build", corruptPeer, deadRegistry, true, built, built,
			[]string{"local: miss", "peer: failed (integrity: ", "registry: failed (unreachable: "}},
		// Corrupt bytes are not hidden behind the canonical source.
		{"peer served bad bytes, registry down", corruptPeer, deadRegistry, false, failed(resolve.KindIntegrity), failed(resolve.KindIntegrity),
			[]string{"local: miss", "peer: failed (integrity: ", "registry: failed (unreachable: ", "producers: skipped", "canonical: skipped ("}},
		// The registry answered: the credentials are wrong, which no
		// local build or fallback hides.
		{"peer down, registry refuses the credentials", onePeer(testenv.ClosedAddr), func(*testing.T, *atomic.Int32) []resolve.Provider {
			return []resolve.Provider{failProvider("registry", registry.Classify(&errcode.ErrorResponse{Method: "GET", StatusCode: 401}), &atomic.Int32{})}
		}, true, failed(resolve.KindAuth), failed(resolve.KindAuth), []string{"local: miss", "peer: failed (unreachable: ", "registry: failed (auth: "}},
	} {
		for _, mode := range []resolve.Mode{resolve.Preferred, resolve.Required} {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				calls := &atomic.Int32{}
				cfg := resolve.Config{Mode: mode, Root: filepath.Join(t.TempDir(), "root"), AllowLocalBuild: tc.build}
				if tc.peers != nil {
					cfg.Peers = tc.peers(t)
				}
				cfg.Providers = tc.registry(t, calls)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := newRuntime(t, cfg).Resolve(ctx, resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}})
				//lint:ignore SA5001 Resolve returns a Resolution to close with every error
				defer res.Close()
				if ctx.Err() != nil {
					t.Fatalf("resolution took the whole context: %v", err)
				}
				want := tc.preferred
				if mode == resolve.Required {
					want = tc.required
				}
				rep := res.Report
				if rep.Outcome != want.outcome || (want.source != "" && rep.Source != want.source) {
					t.Fatalf("outcome %s from %q, want %s from %q: %v\n%+v", rep.Outcome, rep.Source, want.outcome, want.source, err, rep.Steps)
				}
				passed := passedOver(rep)
				if mode == resolve.Required && want.outcome == resolve.OutcomeFailed && want.kind != resolve.KindAuth &&
					!strings.HasPrefix(tc.passed[len(tc.passed)-1], "canonical:") {
					tc.passed = append(slices.Clone(tc.passed), "canonical: skipped (required mode never falls back")
				}
				if len(passed) != len(tc.passed) {
					t.Fatalf("passed over %d sources, want %d:\n%s", len(passed), len(tc.passed), strings.Join(passed, "\n"))
				}
				for i, p := range tc.passed {
					if !strings.HasPrefix(passed[i], p) {
						t.Errorf("step %d: %q, want %q…", i, passed[i], p)
					}
				}
				if want.outcome != resolve.OutcomeFailed {
					if err != nil || (res.Lease == nil) != (want.outcome == resolve.OutcomeCanonical) {
						t.Fatalf("%v, lease %v", err, res.Lease)
					}
					return
				}
				var f *resolve.Failure
				if !errors.As(err, &f) || f.Kind != want.kind || res.Lease != nil {
					t.Fatalf("failure %v, want kind %s", err, want.kind)
				}
				d, oerr := store.Open(context.Background(), cfg.Root, nil)
				if oerr != nil {
					t.Fatal(oerr)
				}
				if l, lerr := d.Lookup(context.Background(), rep.ID, store.ManifestAndMetadata); lerr == nil {
					l.Close()
					t.Fatalf("a failed resolution left %s READY", rep.ID.Short())
				}
				if want.kind == resolve.KindAuth {
					return // visible at once: no SourcesError
				}
				// Every source passed over is in the error, with its reason.
				var se *resolve.SourcesError
				if !errors.As(f.Err, &se) {
					t.Fatalf("not every source named: %v", err)
				}
				for _, p := range passed {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("the error does not name %q: %v", p, err)
					}
				}
				if want.kind == resolve.KindUnreachable && !errdefs.IsUnavailable(err) {
					t.Errorf("not unavailable: %v", err)
				}
				if want.kind == resolve.KindIntegrity && !errdefs.IsDataLoss(err) {
					t.Errorf("not data loss: %v", err)
				}
			})
		}
	}
}

// TestNoCanonicalSourceNamesEverySource: preferred mode with nothing to
// fall back to (an identity, no source directory) fails as required mode
// does once every source passed over, naming each.
func TestNoCanonicalSourceNamesEverySource(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	id := identityOf(t, producers.Passthrough{}, src)
	cfg := resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Peers: []resolve.Provider{peerAt(testenv.ClosedAddr(t))}}
	cfg.Providers = deadRegistry(t, nil)
	res, err := newRuntime(t, cfg).Resolve(context.Background(), resolve.Request{Identity: &id})
	//lint:ignore SA5001 Resolve returns a Resolution to close with every error
	defer res.Close()
	var se *resolve.SourcesError
	if !errors.As(err, &se) || !errdefs.IsUnavailable(err) || res.Report.Outcome != resolve.OutcomeFailed {
		t.Fatalf("%v (outcome %s)", err, res.Report.Outcome)
	}
	want := []string{"local: miss", "peer: failed (unreachable: ", "registry: failed (unreachable: ", "canonical: skipped (no canonical source directory)"}
	got := passedOver(res.Report)
	if len(got) != len(want) {
		t.Fatalf("passed over:\n%s", strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) || !strings.Contains(err.Error(), got[i]) {
			t.Errorf("%q: want %q…, named in %v", got[i], w, err)
		}
	}
}
