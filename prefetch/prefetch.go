package prefetch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// Entry states.
const (
	StatePending = "pending" // not tried yet
	StateReady   = "ready"   // in the store, pinned if its entry says so
	StateFailed  = "failed"  // the last try failed; retried after a backoff
	// StateInvalid is a file that cannot be read or parsed: it declares
	// nothing, and its pins are kept until it is fixed.
	StateInvalid = "invalid"
)

// Resolver brings an entry's artifact into the store (the store, the
// weight peers, the registry) and names it.
type Resolver func(ctx context.Context, e Declared) (artifact.ID, error)

// Config is a Manager's.
type Config struct {
	Dir      string        // the prefetch directory
	Store    *store.Domain // where artifacts are pinned
	Resolve  Resolver
	Every    time.Duration // how often the directory is read (default 2 s)
	RetryMin time.Duration // first backoff of a failed entry (default 1 s)
	RetryMax time.Duration // last (default 5 min)
	Now      func() time.Time
}

// Status is one entry's state, as `weightsnap prefetch ls` shows it.
type Status struct {
	Declared
	State    string      `json:"state"`
	ID       artifact.ID `json:"id,omitzero"`
	Error    string      `json:"error,omitempty"`
	Tries    int         `json:"tries"`
	NextTry  time.Time   `json:"next_try,omitzero"`
	Resolved time.Time   `json:"resolved,omitzero"`
}

// Manager reconciles the store with the prefetch directory.
type Manager struct {
	cfg     Config
	gauge   *prometheus.GaugeVec
	invalid prometheus.Gauge

	mu      sync.Mutex
	entries map[string]*Status // by Declared.key
	bad     map[string]error   // files that could not be read
}

// New makes a Manager; Register adds its metric.
func New(cfg Config) *Manager {
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Second
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = time.Second
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, 5*time.Minute)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{cfg: cfg, entries: map[string]*Status{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "prefetch", Name: "entries",
			Help: "Entries of the prefetch directory by state: pending, ready, failed."}, []string{"state"}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "prefetch", Name: "files_invalid",
			Help: "Files of the prefetch directory that cannot be read or parsed; each declares nothing and keeps its pins."})}
}

// Register adds the manager's metrics to r.
func (m *Manager) Register(r prometheus.Registerer) error {
	if err := r.Register(m.gauge); err != nil {
		return err
	}
	return r.Register(m.invalid)
}

// Run reconciles every Every until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Every)
	defer t.Stop()
	for {
		m.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Settled says whether every declared entry is ready.
func (m *Manager) Settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.entries {
		if s.State != StateReady {
			return false
		}
	}
	return true
}

// Wait syncs until every entry is ready or ctx ends, then reports the
// entries not ready (for weightsnap prefetch sync).
func (m *Manager) Wait(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Every)
	defer t.Stop()
	for {
		m.Sync(ctx)
		if m.Settled() {
			return nil
		}
		select {
		case <-ctx.Done():
			var errs []error
			for _, s := range m.List() {
				if s.State != StateReady {
					errs = append(errs, fmt.Errorf("%s %s: %s: %s", s.File, s.Ref+s.Identity, s.State, s.Error))
				}
			}
			return fmt.Errorf("prefetch: not every entry is ready: %w: %w", errors.Join(errs...), errdefs.ErrUnavailable)
		case <-t.C:
		}
	}
}

// List is every entry's state, and every file that cannot be read as one
// invalid status with its error, by file and reference.
func (m *Manager) List() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.entries)+len(m.bad))
	for _, s := range m.entries {
		out = append(out, *s)
	}
	for name, err := range m.bad {
		out = append(out, Status{Declared: Declared{File: name}, State: StateInvalid, Error: err.Error()})
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// Sync reads the directory once and reconciles: new and failed entries
// whose backoff ended are resolved and pinned (or unpinned, pin = false);
// the prefetch pins no entry declares any more are dropped.
func (m *Manager) Sync(ctx context.Context) {
	declared, bad := readDir(m.cfg.Dir)
	m.mu.Lock()
	for name, err := range bad {
		if m.bad[name] == nil || m.bad[name].Error() != err.Error() {
			log.G(ctx).WithError(err).WithField("file", name).Warn("prefetch: a file cannot be read; it declares nothing and its pins are kept until it is fixed")
		}
	}
	for name := range m.bad {
		if bad[name] == nil {
			log.G(ctx).WithField("file", name).Info("prefetch: a file that could not be read is read again")
		}
	}
	m.bad = bad
	now := m.cfg.Now()
	seen := map[string]bool{}
	var todo []*Status
	for _, d := range declared {
		k := d.key()
		seen[k] = true
		s, ok := m.entries[k]
		if !ok || s.Pin != d.Pin {
			s = &Status{Declared: d, State: StatePending}
			m.entries[k] = s
		}
		if s.State != StateReady && !now.Before(s.NextTry) {
			todo = append(todo, s)
		}
	}
	for k, s := range m.entries {
		if !seen[k] {
			delete(m.entries, k)
			log.G(ctx).WithField("file", s.File).WithField("ref", s.Ref).WithField("id", s.Identity).Info("prefetch: entry left; its pin goes, the artifact stays")
		}
	}
	m.mu.Unlock()
	for _, s := range todo {
		m.resolve(ctx, s)
	}
	m.unpinLeft(ctx, declared, bad)
	m.count()
}

// resolve brings one entry in and pins it or drops its pin.
func (m *Manager) resolve(ctx context.Context, s *Status) {
	logger := log.G(ctx).WithField("file", s.File).WithField("ref", s.Ref).WithField("id", s.Identity)
	id, err := m.cfg.Resolve(ctx, s.Declared)
	if err == nil && !s.Declared.ID.IsZero() && id != s.Declared.ID {
		err = errors.New("the reference resolves to " + id.String() + ", not the declared identity")
	}
	holder := Holder(s.File)
	if err == nil {
		if s.Pin {
			err = m.cfg.Store.Pin(ctx, id, store.Pin{By: holder, Ref: s.Ref, Reason: "declared in the prefetch file " + s.File})
		} else {
			_, err = m.cfg.Store.Unpin(ctx, id, holder)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s.Tries++
	if err != nil {
		backoff := m.cfg.RetryMin << min(s.Tries-1, 20)
		if backoff > m.cfg.RetryMax || backoff <= 0 {
			backoff = m.cfg.RetryMax
		}
		// A failure logs when it begins or changes, not at every retry.
		if s.Error != err.Error() {
			logger.WithError(err).WithField("retry_seconds", backoff.Seconds()).Warn("prefetch: entry not resolved; retrying, logged again when it resolves or fails otherwise")
		}
		s.State, s.Error, s.NextTry = StateFailed, err.Error(), m.cfg.Now().Add(backoff)
		return
	}
	s.State, s.Error, s.ID, s.NextTry, s.Resolved = StateReady, "", id, time.Time{}, m.cfg.Now()
	logger.WithField("id", id.String()).WithField("pinned", s.Pin).Info("prefetch: entry ready")
}

// unpinLeft drops the prefetch pins that no declared entry holds: those of
// files gone, and of a file's artifacts it declares no more (once every
// entry of the file resolved, so that an unresolved one keeps its pin). A
// file that cannot be read keeps its pins.
func (m *Manager) unpinLeft(ctx context.Context, declared []Declared, bad map[string]error) {
	pinned, err := m.cfg.Store.PinnedBy()
	if err != nil {
		log.G(ctx).WithError(err).Warn("prefetch: the store's pins cannot be read")
		return
	}
	m.mu.Lock()
	want := map[string]map[artifact.ID]bool{} // holder -> ids its entries pin
	settled := map[string]bool{}              // holder -> every entry resolved
	for _, d := range declared {
		h := Holder(d.File)
		if want[h] == nil {
			want[h], settled[h] = map[artifact.ID]bool{}, true
		}
		s := m.entries[d.key()]
		switch {
		case s == nil || s.State != StateReady:
			settled[h] = false
		case s.Pin:
			want[h][s.ID] = true
		}
	}
	m.mu.Unlock()
	for id, pins := range pinned {
		for _, p := range pins {
			file, ok := strings.CutPrefix(p.By, "prefetch:")
			if !ok || bad[file] != nil || want[p.By][id] || (want[p.By] != nil && !settled[p.By]) {
				continue
			}
			if _, err := m.cfg.Store.Unpin(ctx, id, p.By); err != nil {
				log.G(ctx).WithError(err).WithField("id", id.String()).Warn("prefetch: pin not dropped")
				continue
			}
			log.G(ctx).WithField("id", id.String()).WithField("file", file).Info("prefetch: unpinned (its entry left); the artifact stays")
		}
	}
}

func (m *Manager) count() {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[string]int{StatePending: 0, StateReady: 0, StateFailed: 0}
	for _, s := range m.entries {
		n[s.State]++
	}
	for state, c := range n {
		m.gauge.WithLabelValues(state).Set(float64(c))
	}
	m.invalid.Set(float64(len(m.bad)))
}
