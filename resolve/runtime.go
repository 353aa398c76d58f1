// Package resolve is the resolution runtime: it turns an exact artifact
// identity into a leased, validated local artifact, or into the canonical
// source where the mode permits, and says how in one terminal report.
//
// Order for one identity: the validated local artifact; then each remote
// provider in configured order (peer, registry), materialised locally
// through the store; then a registered local producer (PRE_LOAD_SAFE only,
// when allow_local_build is on); then the canonical source, where the mode
// permits. The first valid source wins. Modes:
//
//   - disabled: the canonical source, directly; the store root, credentials
//     and the identity are never touched;
//   - preferred: recoverable failures fall back to the canonical source;
//   - required: no lease, no success.
//
// Which failure leads where is one table (Decide). Lock waits are bounded by
// the WaitPolicy; a waiter only ever stops waiting, it never cancels or
// unlocks another process's build.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/store"
)

// Mode is the resolution mode.
type Mode string

// Modes.
const (
	Disabled  Mode = "disabled"
	Preferred Mode = "preferred"
	Required  Mode = "required"
)

// ParseMode parses a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Disabled, Preferred, Required:
		return m, nil
	}
	return "", fmt.Errorf("resolution mode %q: want disabled, preferred or required: %w", s, errdefs.ErrInvalidArgument)
}

// DefaultCoordinationTimeout is the wait budget when none is configured.
const DefaultCoordinationTimeout = 600 * time.Second

// WaitPolicy bounds coordination waits. Store construction (the domain-init
// lock) and each later operation (a lookup's shared lock, a build's lock)
// get their own budget of CoordinationTimeoutSeconds. A spent budget stops
// this process's wait and nothing else.
type WaitPolicy struct {
	CoordinationTimeoutSeconds int `json:"coordination_timeout_seconds" toml:"coordination_timeout_seconds"`
}

// Budget is one operation's wait budget.
func (w WaitPolicy) Budget() time.Duration {
	if w.CoordinationTimeoutSeconds <= 0 {
		return DefaultCoordinationTimeout
	}
	return time.Duration(w.CoordinationTimeoutSeconds) * time.Second
}

// Config configures a Runtime.
type Config struct {
	Mode Mode
	// Root is the store domain's directory.
	Root string
	// Store is the policy of a domain created by the runtime (nil: the
	// store's default); its coordination timeout is replaced by Wait's.
	Store *store.Policy
	// Opened, when not nil, is called once with the domain the runtime
	// opened, before anything uses it: the CLI and the daemon record their
	// configuration file's [store] there.
	Opened func(context.Context, *store.Domain) error
	// Validation is the lookup validation mode; "" uses the domain's policy.
	Validation store.ValidationMode
	Wait       WaitPolicy
	// Peers are the weight peers' providers, asked first of the remote
	// sources: before the provider Locate gives and the other Providers.
	Peers []Provider
	// Providers are the other remote providers (registries), in order.
	Providers []Provider
	// Locate returns the provider of a request's Artifact reference, or an
	// error when that reference may not be used (its host is not a
	// configured registry), which fails the resolution as a policy failure.
	// Nil: Artifact references are not used.
	Locate func(ctx context.Context, ref string) (Provider, error)
	// Producers are the registered local producers. One of them is used
	// when it makes exactly the identity asked for from the request's source.
	Producers []producers.Local
	// AllowLocalBuild lets PRE_LOAD_SAFE producers run during resolution.
	AllowLocalBuild bool
	// AllowPostLoadPublish lets PublishAfterLoad run POST_LOAD_ONLY producers.
	AllowPostLoadPublish bool
	// NoFingerprintCache hashes every source file instead of using
	// <root>/fingerprints.
	NoFingerprintCache bool
	// Trust, if set, is the trust policy: the store's artifacts, the
	// weight peers and the local producers serve only what it accepts,
	// and a remote artifact's verification is kept beside it.
	Trust Trust
}

// Runtime resolves identities against one store domain. It is safe for
// concurrent use. It opens the domain on first need, never in disabled mode.
type Runtime struct {
	cfg Config

	mu    sync.Mutex
	dom   *store.Domain
	evict *evict.Policy // the domain's eviction policy, its RoomMaker
}

// New checks a configuration and returns its runtime; it does no I/O.
func New(cfg Config) (*Runtime, error) {
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Mode != Disabled && cfg.Root == "" {
		return nil, fmt.Errorf("resolve: no store root: %w", errdefs.ErrInvalidArgument)
	}
	switch cfg.Validation {
	case "", store.ManifestAndMetadata, store.FullChecksum:
	default:
		return nil, fmt.Errorf("resolve: validation mode %q: %w", cfg.Validation, errdefs.ErrInvalidArgument)
	}
	return &Runtime{cfg: cfg}, nil
}

// Mode is the runtime's mode.
func (r *Runtime) Mode() Mode { return r.cfg.Mode }

// Domain opens the runtime's store domain (once, within the wait budget)
// and returns it; never call it in disabled mode. Its builds make room
// with the domain's eviction policy (Eviction).
func (r *Runtime) Domain(ctx context.Context) (*store.Domain, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.domain(ctx)
}

// Eviction is the eviction policy of the runtime's store domain, which
// Domain opens.
func (r *Runtime) Eviction(ctx context.Context) (*evict.Policy, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.domain(ctx); err != nil {
		return nil, err
	}
	return r.evict, nil
}

// domain is Domain with r.mu held.
func (r *Runtime) domain(ctx context.Context) (*store.Domain, error) {
	if r.dom != nil {
		return r.dom, nil
	}
	p := store.DefaultPolicy()
	if r.cfg.Store != nil {
		p = *r.cfg.Store
	}
	budget := r.cfg.Wait.Budget()
	p.CoordinationTimeoutSeconds = int(min(math.Ceil(budget.Seconds()), math.MaxInt32))
	bctx, cancel := context.WithTimeoutCause(ctx, budget, errWaitBudget)
	defer cancel()
	if err := evict.CheckPolicy(p); err != nil {
		return nil, err
	}
	d, err := store.Open(bctx, r.cfg.Root, &p)
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(bctx), errWaitBudget) {
			err = fmt.Errorf("%w: %w", err, errWaitBudget)
		}
		return nil, err
	}
	if r.cfg.Opened != nil {
		if err := r.cfg.Opened(ctx, d); err != nil {
			return nil, err
		}
	}
	ev, err := evict.New(d)
	if err != nil {
		return nil, err
	}
	d.SetRoomMaker(ev)
	r.dom, r.evict = d, ev
	return d, nil
}

// fingerprints is the source fingerprint cache of the domain.
func (r *Runtime) fingerprints(d *store.Domain) *fingerprint.Cache {
	if r.cfg.NoFingerprintCache {
		return nil
	}
	return fingerprint.New(filepath.Join(d.Root(), fingerprint.DirName))
}

// Request is one resolution.
type Request struct {
	// Identity is the exact identity, when the caller has it.
	Identity *artifact.Identity
	// Source is the canonical source directory: the fallback, and the input
	// of local producers.
	Source string
	// Target names the model for identities derived from Source.
	Target producers.Target
	// Local derives the identity from Source when Identity is nil, and is
	// tried as a local producer before the registered ones.
	Local producers.Local
	// ID is the identity digest when the caller knows
	// only that (a weight image's pointer label); Identity wins when both
	// are set. Such a request is served by the store and by providers that
	// implement IDProvider.
	ID artifact.ID
	// Artifact is a digest-pinned registry reference that holds the
	// artifact (a pointer label's); its provider (Config.Locate) is tried
	// after the peers, before the configured Providers.
	Artifact string
	// OnProduce, if set, is told of each producer resolution is about to
	// run, local or remote, with the source it stands for ("producer:NAME",
	// "registry", "peer"), so a caller can show its progress (an
	// artifact.ProgressReporter says how far it is).
	OnProduce func(source string, p artifact.Producer)
	// Hold asks for a lease that keeps the artifact more than it reads it
	// (store.Domain.Hold): a store hit's payload files are opened when first
	// asked for (store.Lease.File).
	Hold bool
}

// Resolution is a completed resolution: a leased artifact, or the
// canonical source.
type Resolution struct {
	Report *Report
	// Lease holds the artifact open; nil on the canonical outcome or a failure.
	Lease *store.Lease
	// Path is the artifact directory, or the canonical source directory.
	Path string
}

// Canonical reports whether the resolution fell back to the canonical source.
func (r *Resolution) Canonical() bool { return r.Report.Outcome == OutcomeCanonical }

// Close closes the lease.
func (r *Resolution) Close() error {
	if r == nil || r.Lease == nil {
		return nil
	}
	err := r.Lease.Close()
	r.Lease = nil
	return err
}
