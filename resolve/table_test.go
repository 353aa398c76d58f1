package resolve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/loader"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// TestDecideTable checks the failure-to-action table itself, row by row,
// in all three modes.
func TestDecideTable(t *testing.T) {
	next := func(end resolve.Action) resolve.Rule { return resolve.Rule{Step: resolve.ActionNext, End: end} }
	fail := resolve.Rule{Step: resolve.ActionFail, End: resolve.ActionFail}
	direct := resolve.Rule{Step: resolve.ActionCanonical, End: resolve.ActionCanonical}
	for _, tc := range []struct {
		row       string
		f         resolve.Failure
		preferred resolve.Rule
		required  resolve.Rule
	}{
		{"clean miss", resolve.Failure{Kind: resolve.KindMiss}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"invalid cache entry", resolve.Failure{Kind: resolve.KindInvalidCache}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"typed failure, retryable", resolve.Failure{Kind: resolve.KindCoordinationTimeout, Retry: true}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"typed failure, retryable", resolve.Failure{Kind: resolve.KindDomain, Retry: true}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"typed failure, retryable", resolve.Failure{Kind: resolve.KindRemote, Retry: true}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"typed failure, retryable", resolve.Failure{Kind: resolve.KindRestoreCommit, Retry: true}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"source unreachable", resolve.Failure{Kind: resolve.KindUnreachable, Retry: true}, next(resolve.ActionCanonical), next(resolve.ActionFail)},
		{"source served bad bytes", resolve.Failure{Kind: resolve.KindIntegrity}, next(resolve.ActionFail), next(resolve.ActionFail)},
		{"source without an accepted signature", resolve.Failure{Kind: resolve.KindUnsigned}, next(resolve.ActionFail), next(resolve.ActionFail)},
		{"always visible", resolve.Failure{Kind: resolve.KindAuth}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindPolicy}, fail, fail},
		{"typed failure, not retryable", resolve.Failure{Kind: resolve.KindRemote}, fail, fail},
		{"typed failure, not retryable", resolve.Failure{Kind: resolve.KindDomain}, fail, fail},
		{"typed failure, not retryable", resolve.Failure{Kind: resolve.KindCapacity}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindUnsupported}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindIdentityCollision}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindProducer, Retry: true}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindPublication, Retry: true}, fail, fail},
		{"always visible", resolve.Failure{Kind: resolve.KindInvalidRequest}, fail, fail},
	} {
		t.Run(fmt.Sprintf("%s/%s/retry=%v", tc.row, tc.f.Kind, tc.f.Retry), func(t *testing.T) {
			if got := resolve.TableRow(&tc.f); got != tc.row {
				t.Fatalf("row %q, want %q", got, tc.row)
			}
			for mode, want := range map[resolve.Mode]resolve.Rule{resolve.Disabled: direct, resolve.Preferred: tc.preferred, resolve.Required: tc.required} {
				if got := resolve.Decide(mode, &tc.f); got != want {
					t.Fatalf("%s: %+v, want %+v", mode, got, want)
				}
			}
		})
	}
}

// env is one table scenario's setting.
type env struct {
	root, src string
	calls     *atomic.Int32 // calls into providers and local producers, which disabled mode never makes
}

type want struct {
	outcome resolve.Outcome
	kind    resolve.Kind
	retry   bool
}

// TestFailureToActionRowByRow drives each row of the table with a real
// failure through the runtime in all three modes.
func TestFailureToActionRowByRow(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 1<<20, 2)
	canonical := func(k resolve.Kind, retry bool) want { return want{resolve.OutcomeCanonical, k, retry} }
	failed := func(k resolve.Kind, retry bool) want { return want{resolve.OutcomeFailed, k, retry} }
	provider := func(err error) func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
		return func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			rc, _ := spy(producers.Passthrough{})
			rc.calls = e.calls
			return resolve.Config{Providers: []resolve.Provider{failProvider("peer", err, e.calls)}},
				resolve.Request{Source: e.src, Target: target, Local: rc}
		}
	}
	local := func(produce func(context.Context, artifact.Writer) error) func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
		return func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			rc := spyLocal{Local: &testLocal{name: "test-producer", phase: producers.PreLoadSafe, produce: produce}, calls: e.calls}
			return resolve.Config{AllowLocalBuild: true}, resolve.Request{Source: e.src, Target: target, Local: rc}
		}
	}
	passthrough := func(e *env) resolve.Request {
		rc := spyLocal{Local: producers.Passthrough{}, calls: e.calls}
		return resolve.Request{Source: e.src, Target: target, Local: rc}
	}
	for _, tc := range []struct {
		name      string
		setup     func(t *testing.T, e *env) (resolve.Config, resolve.Request)
		preferred want
		required  want
	}{
		{"clean miss", func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			return resolve.Config{}, passthrough(e)
		}, canonical(resolve.KindMiss, false), failed(resolve.KindMiss, false)},

		{"invalid cache entry", func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			pub := newRuntime(t, resolve.Config{Root: e.root, AllowLocalBuild: true})
			res, err := pub.Resolve(context.Background(), resolve.Request{Source: e.src, Target: target, Local: producers.Passthrough{}})
			if err != nil {
				t.Fatal(err)
			}
			dir := res.Path
			res.Close()
			if err := os.Chmod(dir, 0o755); err != nil { // no longer hardened: invalid
				t.Fatal(err)
			}
			return resolve.Config{}, passthrough(e)
		}, canonical(resolve.KindInvalidCache, false), failed(resolve.KindInvalidCache, false)},

		{"retryable remote failure", provider(fmt.Errorf("fetch: %w", retryErr{})),
			canonical(resolve.KindRemote, true), failed(resolve.KindRemote, true)},

		{"remote unavailable", provider(fmt.Errorf("registry down: %w", errdefs.ErrUnavailable)),
			canonical(resolve.KindUnreachable, true), failed(resolve.KindUnreachable, true)},

		{"remote refused", provider(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}),
			canonical(resolve.KindUnreachable, true), failed(resolve.KindUnreachable, true)},

		{"remote served bad bytes", provider(fmt.Errorf("unit 3: BLAKE3 mismatch: %w", errdefs.ErrDataLoss)),
			failed(resolve.KindIntegrity, false), failed(resolve.KindIntegrity, false)},

		{"build lock wait timeout", func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			holdBuildLock(t, e.root, identityOf(t, producers.Passthrough{}, e.src))
			return resolve.Config{AllowLocalBuild: true, Wait: resolve.WaitPolicy{CoordinationTimeoutSeconds: 1}}, passthrough(e)
		}, canonical(resolve.KindCoordinationTimeout, true), failed(resolve.KindCoordinationTimeout, true)},

		{"domain-init lock timeout", func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			holdDomainLock(t, e.root)
			return resolve.Config{Wait: resolve.WaitPolicy{CoordinationTimeoutSeconds: 1}}, passthrough(e)
		}, canonical(resolve.KindDomain, true), failed(resolve.KindDomain, true)},

		{"remote failure, not retryable", provider(fmt.Errorf("pull: %w", errdefs.ErrInvalidArgument)),
			failed(resolve.KindRemote, false), failed(resolve.KindRemote, false)},

		{"remote refuses the credentials", provider(fmt.Errorf("pull: %w", errdefs.ErrPermissionDenied)),
			failed(resolve.KindAuth, false), failed(resolve.KindAuth, false)},

		{"capacity", func(t *testing.T, e *env) (resolve.Config, resolve.Request) {
			p := store.DefaultPolicy()
			p.MaxArtifactBytes = 1
			return resolve.Config{AllowLocalBuild: true, Store: &p}, passthrough(e)
		}, failed(resolve.KindCapacity, false), failed(resolve.KindCapacity, false)},

		{"unsupported capability", provider(fmt.Errorf("no ModelPack support: %w", errdefs.ErrNotImplemented)),
			failed(resolve.KindUnsupported, false), failed(resolve.KindUnsupported, false)},

		{"identity collision", provider(fmt.Errorf("manifest names another identity: %w", errdefs.ErrConflict)),
			failed(resolve.KindIdentityCollision, false), failed(resolve.KindIdentityCollision, false)},

		{"producer failure", local(func(context.Context, artifact.Writer) error {
			return fmt.Errorf("checkpoint unreadable: %w", retryErr{}) // retryable or not, a producer failure stays visible
		}), failed(resolve.KindProducer, false), failed(resolve.KindProducer, false)},

		{"publication failure", local(func(context.Context, artifact.Writer) error {
			return nil // writes nothing: the store refuses to publish
		}), failed(resolve.KindPublication, false), failed(resolve.KindPublication, false)},
	} {
		for _, mode := range []resolve.Mode{resolve.Disabled, resolve.Preferred, resolve.Required} {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				e := &env{root: filepath.Join(t.TempDir(), "root"), src: src, calls: &atomic.Int32{}}
				cfg, req := tc.setup(t, e)
				cfg.Mode, cfg.Root = mode, e.root
				e.calls.Store(0)
				if mode == resolve.Disabled {
					cfg.Root = filepath.Join(t.TempDir(), "absent")
				}
				res, err := newRuntime(t, cfg).Resolve(context.Background(), req)
				//lint:ignore SA5001 Resolve returns a Resolution to close with every error
				defer res.Close()
				rep := res.Report
				if _, jerr := json.Marshal(rep); jerr != nil {
					t.Fatal(jerr)
				}
				if mode == resolve.Disabled {
					if err != nil || rep.Outcome != resolve.OutcomeCanonical || res.Path != src || e.calls.Load() != 0 {
						t.Fatalf("disabled: %v %s %s, %d calls", err, rep.Outcome, res.Path, e.calls.Load())
					}
					mustNotExist(t, cfg.Root)
					return
				}
				w := tc.preferred
				if mode == resolve.Required {
					w = tc.required
				}
				var f *resolve.Failure
				switch w.outcome {
				case resolve.OutcomeCanonical:
					if err != nil || rep.Outcome != w.outcome || res.Path != src || res.Lease != nil || len(rep.Recovered) == 0 {
						t.Fatalf("got %v, outcome %s path %s, recovered %v", err, rep.Outcome, res.Path, rep.Recovered)
					}
					f = rep.Recovered[len(rep.Recovered)-1]
				default:
					if !errors.As(err, &f) || rep.Outcome != w.outcome || rep.Failure != f || res.Lease != nil {
						t.Fatalf("got %v, outcome %s", err, rep.Outcome)
					}
				}
				if f.Kind != w.kind || f.Retryable() != w.retry {
					t.Fatalf("failure %s (retryable %v), want %s (retryable %v): %v", f.Kind, f.Retryable(), w.kind, w.retry, f)
				}
			})
		}
	}
}

// holdBuildLock holds an identity's build lock, as another process's
// running build would, until the test ends: a store build in another
// domain handle whose producer waits.
func holdBuildLock(t *testing.T, root string, id artifact.Identity) {
	t.Helper()
	d, err := store.Open(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		l, _, err := d.GetOrBuild(context.Background(), id, artifact.ProducerFunc{ProducerName: "slow", Fn: func(ctx context.Context, w artifact.Writer) error {
			close(started)
			<-release
			return errors.New("abandoned")
		}})
		if err == nil {
			l.Close()
		}
	}()
	<-started
	t.Cleanup(func() { close(release); <-done })
}

// holdDomainLock holds the domain-init lock, as a process creating the
// domain would.
func holdDomainLock(t *testing.T, root string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, "locks", "domain.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

func TestDisabledTouchesNothing(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "no", "such", "root")
	calls := &atomic.Int32{}
	rc := spyLocal{Local: producers.Passthrough{}, calls: calls}
	rt := newRuntime(t, resolve.Config{Mode: resolve.Disabled, Root: root, AllowLocalBuild: true, AllowPostLoadPublish: true,
		Providers: []resolve.Provider{failProvider("peer", errors.New("called"), calls)}})
	bogus := &artifact.Identity{} // never read, let alone validated
	src := filepath.Join(base, "canonical")
	res, err := rt.Resolve(context.Background(), resolve.Request{Identity: bogus, Source: src, Local: rc})
	if err != nil || !res.Canonical() || res.Path != src || !res.Report.ID.IsZero() {
		t.Fatalf("%v %+v", err, res.Report)
	}
	rep, err := rt.PublishAfterLoad(context.Background(), artifact.Identity{}, &loader.TensorMap{})
	if err != nil || rep.Outcome != resolve.OutcomeSkipped {
		t.Fatalf("publish in disabled mode: %v %+v", err, rep)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d calls into providers or producers", calls.Load())
	}
	mustNotExist(t, filepath.Join(base, "no"))
	if _, err := rt.Resolve(context.Background(), resolve.Request{}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("disabled without a canonical source: %v", err)
	}
	mustNotExist(t, filepath.Join(base, "no"))
}

// TestWaitBudgetNeverCancelsOwnBuild: the budget bounds waits only; a
// build that takes longer than the budget completes.
func TestWaitBudgetNeverCancelsOwnBuild(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 256<<10, 1)
	slow := &testLocal{name: "slow", phase: producers.PreLoadSafe, produce: func(ctx context.Context, w artifact.Writer) error {
		if err := sleepCtx(ctx, 1500); err != nil {
			return err
		}
		p, _ := producers.Passthrough{}.Producer(mustScan(t, src))
		return p.Produce(ctx, w)
	}}
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: true,
		Wait: resolve.WaitPolicy{CoordinationTimeoutSeconds: 1}})
	res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: slow})
	if err != nil || res.Report.Outcome != resolve.OutcomeBuilt {
		t.Fatalf("%v %+v", err, res.Report)
	}
	res.Close()
}

func TestRemoteProviderFetch(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 512<<10, 2)
	scanned := mustScan(t, src)
	var order []string
	miss := resolve.ProviderFunc{ProviderName: "peer", Fn: func(context.Context, artifact.Identity) (artifact.Producer, error) {
		order = append(order, "peer")
		return nil, fmt.Errorf("not held: %w", errdefs.ErrNotFound)
	}}
	registry := resolve.ProviderFunc{ProviderName: "registry", Fn: func(_ context.Context, id artifact.Identity) (artifact.Producer, error) {
		order = append(order, "registry")
		return producers.Passthrough{}.Producer(scanned) // stands in for a pull through the store's writer
	}}
	calls := &atomic.Int32{}
	rc := spyLocal{Local: producers.Passthrough{}, calls: calls}
	rt := newRuntime(t, resolve.Config{Root: filepath.Join(t.TempDir(), "root"), Mode: resolve.Required, AllowLocalBuild: true,
		Providers: []resolve.Provider{miss, registry}})
	res, err := rt.Resolve(context.Background(), resolve.Request{Source: src, Target: target, Local: rc})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	rep := res.Report
	if rep.Outcome != resolve.OutcomeFetched || rep.Source != "registry" || strings.Join(order, ",") != "peer,registry" ||
		rep.BytesMoved != res.Lease.Index.TotalBytes() || len(rep.Recovered) != 2 || rep.Recovered[1].Kind != resolve.KindMiss {
		t.Fatalf("order %v, report %+v", order, rep)
	}
	if calls.Load() != 1 { // the local producer derived the identity; it never produced
		t.Fatalf("%d local producer calls", calls.Load())
	}
}

func mustScan(t testing.TB, dir string) *artifact.SourceDir {
	t.Helper()
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestWaiterLeavesOtherBuildAlone: a waiter whose budget runs out gives up
// with a retryable timeout; the build it waited for goes on, publishes,
// and the next resolve hits it.
func TestWaiterLeavesOtherBuildAlone(t *testing.T) {
	src := storetest.SettledCheckpoint(t, 512<<10, 2)
	root := filepath.Join(t.TempDir(), "root")
	id := identityOf(t, producers.Passthrough{}, src)
	d, err := store.Open(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	type result struct {
		res store.BuildResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, _ := producers.Passthrough{}.Producer(mustScan(t, src))
		l, res, err := d.GetOrBuild(context.Background(), id, artifact.ProducerFunc{ProducerName: "other", Fn: func(ctx context.Context, w artifact.Writer) error {
			close(started)
			<-release
			return p.Produce(ctx, w)
		}})
		if err == nil {
			l.Close()
		}
		done <- result{res, err}
	}()
	<-started
	cfg := resolve.Config{Root: root, Mode: resolve.Required, AllowLocalBuild: true, Wait: resolve.WaitPolicy{CoordinationTimeoutSeconds: 1}}
	res, err := newRuntime(t, cfg).Resolve(context.Background(), resolve.Request{Identity: &id, Source: src, Local: producers.Passthrough{}})
	var f *resolve.Failure
	if !errors.As(err, &f) || f.Kind != resolve.KindCoordinationTimeout || !f.Retryable() || res.Report.Counters.ProducerRuns != 0 {
		t.Fatalf("waiter: %v", err)
	}
	select {
	case r := <-done:
		t.Fatalf("the other build ended when the waiter gave up: %+v", r)
	default:
	}
	close(release)
	if r := <-done; r.err != nil || !r.res.Built {
		t.Fatalf("the other build: %+v", r)
	}
	res, err = newRuntime(t, cfg).Resolve(context.Background(), resolve.Request{Identity: &id, Source: src, Local: producers.Passthrough{}})
	if err != nil || res.Report.Outcome != resolve.OutcomeHit {
		t.Fatalf("after the other build: %v", err)
	}
	res.Close()
}
