// Package snapshotter is weightsnap's containerd snapshotter: overlayfs for
// ordinary layers, views of the node's store for weight layers.
//
// A container gets its weights with no unpack and no copy, page for page
// shared with every other container of the node. A weight layer is one
// whose labels, the pointer layer's annotations that containerd passes to
// Prepare, name an artifact: containerd.io/snapshot/weightsnap.{artifact,
// identity,target}. Its Prepare validates the labels (pointer.ParseLabels)
// and resolves the ID through the resolution runtime: the store, then the
// peers and the registry the label names, one resolution per ID at a time.
// It commits a weight snapshot under the containerd.io/snapshot.ref chain
// ID, fills it with the artifact's shared view, and answers
// errdefs.ErrAlreadyExists, so containerd fetches and applies nothing. A
// pointer layer unpacked without its labels is recognised at Commit
// (detect.go). When the artifact cannot be had, required mode fails the
// Prepare; preferred mode lets the pointer layer unpack, marks the snapshot
// a fallback and repairs it in the background (repair.go). A weight
// snapshot's states and the transitions between them are in states.go.
//
// While something uses an artifact the snapshotter holds a store lease on
// it, so weightsnap rm refuses. Its users are an active snapshot over its
// weight snapshot (a container's rootfs, an image volume, containerd's
// View), a host mount (hostmount.go) and a Prepare in flight. A committed
// weight snapshot alone holds none (use.go). The record of that is the
// snapshots' own labels and parents, kept by the overlay snapshotter's
// metastore, and each host mount's record file. New takes every lease
// again from the store alone (retake.go); Remove drops a lease with the
// last user. One holder table (holders.go) says what uses which artifact,
// leased or waiting for a repair. HostMounts are the host mounts the
// control API (package control) serves.
package snapshotter

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/plugins/snapshots/overlay"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// Resolver turns a weight layer's ID into a leased local artifact, and
// says whether the trust policy lets the store's artifact serve a mount;
// *resolve.Runtime is one.
type Resolver interface {
	Resolve(ctx context.Context, req resolve.Request) (*resolve.Resolution, error)
	// Trusted is nil when the trust policy, as it stands, accepts the
	// store's artifact id for a request naming ref, from its recorded
	// verification; else the refusal.
	Trusted(ctx context.Context, id artifact.ID, ref string) error
}

// Config configures a Snapshotter.
type Config struct {
	// Root is the snapshotter's directory: the overlay snapshotter's root,
	// mounts/ for host mounts, links/, the views' shared symlinks, and
	// views/, the views weight snapshots share. It must be on the store's
	// filesystem.
	Root string
	// Store is the node's store domain, whose payload files views link to.
	Store *store.Domain
	// Resolver resolves weight layers and host mounts.
	Resolver Resolver
	// Mode is what a weight layer whose artifact cannot be had does when
	// its image does not say (pointer.LabelMode): resolve.Required (also "")
	// fails its Prepare; resolve.Preferred lets the pointer layer unpack,
	// and the weights are filled in once the artifact resolves.
	Mode resolve.Mode
	// Retry paces the background repairs: the first try after Retry.Initial,
	// each later wait twice the last, up to Retry.Max. Zero values are
	// DefaultRetry's.
	Retry Backoff
	// Metrics records what the snapshotter does; nil makes unregistered ones.
	Metrics *Metrics
}

// Backoff is an exponential backoff.
type Backoff struct {
	Initial, Max time.Duration
}

// DefaultRetry is the repairs' backoff when none is configured.
var DefaultRetry = Backoff{Initial: time.Second, Max: 5 * time.Minute}

// Keys of the snapshotter's own short-lived snapshots; those a crash left
// behind are removed at start.
const (
	tmpView   = "weightsnap-view"   // a weight layer's view, before its commit
	tmpRepair = "weightsnap-repair" // a view to find a committed snapshot's directory
)

// Snapshotter is containerd's overlay snapshotter with weight layers.
type Snapshotter struct {
	root    string
	store   *store.Domain
	mode    resolve.Mode
	overlay snapshots.Snapshotter
	life    *life
	holders *holderTable
	leases  *leases
	repairs *repairs
	mounts  *HostMounts
	links   *linkPool    // the hub cache views' symlinks
	views   *sharedViews // the views weight snapshots link to
	metrics *Metrics

	// The locks are taken in this order, and none while a later one is
	// held: gate, fillMu, HostMounts.mu, repairs.mu, leases.mu,
	// holderTable.mu (states.go).

	// gate keeps Release (write) from emptying a weight snapshot while
	// something is made over it (read: over).
	gate sync.RWMutex
	// fillMu orders the fills of emptied weight snapshots (a Prepare's
	// commitAndFill and a refill), Release's empty and the sweep of
	// shared views.
	fillMu sync.Mutex
}

var _ snapshots.Snapshotter = (*Snapshotter)(nil)

// New opens the snapshotter at cfg.Root and takes again the leases of what
// uses weight snapshots.
//
// Root and the store must share a filesystem, since views are hardlinks.
// New opens the overlay snapshotter at Root. It takes the leases of every
// active snapshot over weight snapshots and every host mount from the
// store alone; what the store cannot serve now is repaired in the
// background (retake). The resolutions and repairs it starts run until
// Close, with ctx's values (its logger) but not its cancellation.
func New(ctx context.Context, cfg Config) (*Snapshotter, error) {
	if cfg.Store == nil || cfg.Resolver == nil || cfg.Root == "" {
		return nil, fmt.Errorf("snapshotter: a root, a store and a resolver are needed: %w", errdefs.ErrInvalidArgument)
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = resolve.Required
	case resolve.Required, resolve.Preferred:
	default:
		return nil, fmt.Errorf("snapshotter: mode %q: want required or preferred: %w", cfg.Mode, errdefs.ErrInvalidArgument)
	}
	if cfg.Retry.Initial <= 0 {
		cfg.Retry.Initial = DefaultRetry.Initial
	}
	if cfg.Retry.Max < cfg.Retry.Initial {
		cfg.Retry.Max = max(cfg.Retry.Initial, DefaultRetry.Max)
	}
	if err := sameFilesystem(cfg.Root, cfg.Store.Root()); err != nil {
		return nil, err
	}
	links, err := newLinkPool(filepath.Join(cfg.Root, "links"))
	if err != nil {
		return nil, err
	}
	if err := links.sweep(); err != nil {
		log.G(ctx).WithError(err).Warn("link pool: entries no view links stay until the next Cleanup")
	}
	views, err := newSharedViews(filepath.Join(cfg.Root, "views"))
	if err != nil {
		return nil, err
	}
	ov, err := overlay.NewSnapshotter(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("snapshotter: overlay at %s: %w", cfg.Root, err)
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics()
	}
	s := &Snapshotter{root: cfg.Root, store: cfg.Store, mode: cfg.Mode, overlay: ov, metrics: m,
		links: links, views: views, life: newLife(ctx), holders: newHolderTable(m)}
	s.leases = newLeases(s.life, cfg.Resolver, s.holders, m)
	s.repairs = newRepairs(s.life, s, cfg.Retry)
	s.mounts = newHostMounts(s, filepath.Join(cfg.Root, "mounts"))
	if err := s.retake(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Prepare creates an active snapshot, or commits a weight layer's snapshot
// with its weights in place.
//
// A weight layer's Prepare answers errdefs.ErrAlreadyExists. In preferred
// mode, when the artifact cannot be had, it prepares an ordinary layer
// marked a fallback instead. Any other snapshot over weight snapshots
// leases their artifacts while it exists (use), once the trust policy as it
// stands accepts each (trusted). Those that Release emptied are refilled
// first (over).
func (s *Snapshotter) Prepare(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	labels, err := optLabels(opts)
	if err != nil {
		return nil, err
	}
	if !pointer.IsWeightLayer(labels) {
		m, err := s.over(ctx, key, parent, labels, func() ([]mount.Mount, error) { return s.overlay.Prepare(ctx, key, parent, opts...) })
		s.metrics.ordinary(err)
		return m, err
	}
	return s.prepareWeights(ctx, key, parent, labels)
}

// View creates containerd's read-only View of parent, which leases the
// artifacts of the weight snapshots under it while it exists (use, over).
func (s *Snapshotter) View(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	labels, err := optLabels(opts)
	if err != nil {
		return nil, err
	}
	return s.over(ctx, key, parent, labels, func() ([]mount.Mount, error) { return s.overlay.View(ctx, key, parent, opts...) })
}

// optLabels are the labels opts set.
func optLabels(opts []snapshots.Opt) (map[string]string, error) {
	var info snapshots.Info
	for _, o := range opts {
		if err := o(&info); err != nil {
			return nil, err
		}
	}
	return info.Labels, nil
}

// Mounts returns the mounts of an active snapshot.
func (s *Snapshotter) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	return s.overlay.Mounts(ctx, key)
}

// Commit commits an active snapshot, which lets its leases go.
//
// A fallback stays marked as one, and its repair starts. A pointer layer
// unpacked without its labels becomes a weight snapshot (commitFound).
func (s *Snapshotter) Commit(ctx context.Context, name, key string, opts ...snapshots.Opt) error {
	err := s.commit(ctx, name, key, opts)
	if err == nil {
		s.unuse(ctx, key)
	}
	return err
}

func (s *Snapshotter) commit(ctx context.Context, name, key string, opts []snapshots.Opt) error {
	active, err := s.overlay.Stat(ctx, key)
	switch {
	case err != nil || active.Kind != snapshots.KindActive: // the overlay snapshotter says what is wrong
	case stateOf(active) == stateFallback:
		opts = append(opts, snapshots.WithLabels(map[string]string{LabelFallback: active.Labels[LabelFallback]}))
		if err := s.overlay.Commit(ctx, name, key, opts...); err != nil {
			return err
		}
		if ptr, _, err := pointer.ParseLabels(active.Labels); err == nil {
			s.repairs.add(ptr, name)
		}
		return nil
	case !pointer.IsWeightLayer(active.Labels):
		return s.commitFound(ctx, name, key, opts)
	}
	return s.overlay.Commit(ctx, name, key, opts...)
}

// Stat returns a snapshot's info.
func (s *Snapshotter) Stat(ctx context.Context, key string) (snapshots.Info, error) {
	return s.overlay.Stat(ctx, key)
}

// Update updates a snapshot's labels.
func (s *Snapshotter) Update(ctx context.Context, info snapshots.Info, fieldpaths ...string) (snapshots.Info, error) {
	return s.overlay.Update(ctx, info, fieldpaths...)
}

// Usage returns a snapshot's disk usage.
func (s *Snapshotter) Usage(ctx context.Context, key string) (snapshots.Usage, error) {
	return s.overlay.Usage(ctx, key)
}

// Walk walks the snapshots that match the filters.
func (s *Snapshotter) Walk(ctx context.Context, fn snapshots.WalkFunc, filters ...string) error {
	return s.overlay.Walk(ctx, fn, filters...)
}

// Remove removes a snapshot; the last user of an artifact takes its lease
// with it.
func (s *Snapshotter) Remove(ctx context.Context, key string) error {
	if err := s.overlay.Remove(ctx, key); err != nil {
		return err
	}
	s.unuse(ctx, key)
	return nil
}

// Cleanup removes the directories of removed snapshots, then the shared
// views no weight snapshot links to, then the pooled symlinks no view
// links any more.
func (s *Snapshotter) Cleanup(ctx context.Context) error {
	if c, ok := s.overlay.(snapshots.Cleaner); ok {
		if err := c.Cleanup(ctx); err != nil {
			return err
		}
	}
	if err := s.sweepViews(ctx); err != nil {
		return err
	}
	return s.links.sweep()
}

// Close stops the repairs and the resolutions and waits for them, closes
// every lease and closes the overlay snapshotter. Host mounts stay mounted,
// and the next New takes them again.
func (s *Snapshotter) Close() error {
	s.life.end()
	s.leases.close()
	return s.overlay.Close()
}

// life is the snapshotter's background work: resolutions nobody waits for
// any more and the repair loops. It runs with the values of New's context
// (its logger), not its deadline or cancellation, until Close, which
// cancels it and waits for it.
type life struct {
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func newLife(ctx context.Context) *life {
	lf := &life{}
	lf.ctx, lf.stop = context.WithCancel(context.WithoutCancel(ctx))
	return lf
}

// end cancels the work and waits for it.
func (lf *life) end() {
	lf.stop()
	lf.wg.Wait()
}
