// Package evict is the store's eviction policy: which READY artifacts go,
// in what order, when and why. The store removes one artifact at a time
// (store.Domain.Evict); this package chooses them. It orders the
// candidates least recently used first, keeps the filesystem between the
// watermarks, makes the room a build lacks (store.RoomMaker), demotes an
// artifact the kubelet no longer needs, has releasers let go of an
// artifact's users outside the store before it goes, and counts the
// evictions.
package evict

import (
	"fmt"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/store"
)

// Eviction modes, the [store] eviction setting.
const (
	// LRU evicts unleased, unpinned READY artifacts, least recently used
	// first, when a build would cross max_store_bytes or min_free_bytes.
	LRU = "lru"
	// Off refuses such a build.
	Off = "off"
)

// Reasons for an eviction, the reason label of weightsnap_store_evictions_total.
const (
	Capacity  = "capacity"  // a build needed the room
	Watermark = "watermark" // the filesystem was past the high watermark
	Manual    = "manual"    // weightsnap gc --evict
	Unneeded  = "unneeded"  // the kubelet removed the last image that needs it, the filesystem past the low watermark
)

// Policy is the eviction policy of one store domain.
// Its settings are the domain's (store.Policy: eviction and the watermarks).
type Policy struct {
	d         *store.Domain
	releaser  atomic.Pointer[Releaser]
	evictions *prometheus.CounterVec
	onEvict   func(store.Evicted)
}

// New is the eviction policy of d.
// It refuses a domain whose eviction settings are wrong.
func New(d *store.Domain) (*Policy, error) {
	if err := CheckPolicy(d.Policy()); err != nil {
		return nil, err
	}
	p := &Policy{d: d, evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "store",
		Name: "evictions_total", Help: "Artifacts this process evicted, by reason: capacity (a build needed the room), watermark, manual, unneeded."}, []string{"reason"})}
	for _, r := range []string{Capacity, Watermark, Manual, Unneeded} {
		p.evictions.WithLabelValues(r)
	}
	return p, nil
}

// CheckPolicy checks a domain policy's eviction settings.
func CheckPolicy(p store.Policy) error {
	switch {
	case p.Eviction != "" && p.Eviction != LRU && p.Eviction != Off:
		return fmt.Errorf("policy: unknown eviction %q (want lru or off): %w", p.Eviction, errdefs.ErrInvalidArgument)
	case p.HighWatermarkPercent < 0 || p.HighWatermarkPercent > 100 || p.LowWatermarkPercent < 0 || p.LowWatermarkPercent > 100:
		return fmt.Errorf("policy: watermarks are percents from 0 to 100: %w", errdefs.ErrInvalidArgument)
	case p.HighWatermarkPercent > 0 && p.LowWatermarkPercent > p.HighWatermarkPercent:
		return fmt.Errorf("policy: low_watermark_percent %d is above high_watermark_percent %d: %w", p.LowWatermarkPercent, p.HighWatermarkPercent, errdefs.ErrInvalidArgument)
	}
	return nil
}

// SetReleaser makes evictions call r first, to let go of the users outside the store.
func (p *Policy) SetReleaser(r Releaser) { p.releaser.Store(&r) }

// OnEvict calls fn after every eviction the policy makes.
// Call it once, before the policy is shared.
func (p *Policy) OnEvict(fn func(store.Evicted)) { p.onEvict = fn }

// Collector is the policy's metrics: the evictions it made, by reason.
func (p *Policy) Collector() prometheus.Collector { return p.evictions }

// evicts says whether the domain's policy lets builds evict.
func (p *Policy) evicts() bool { return p.d.Policy().Eviction != Off }
