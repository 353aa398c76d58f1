package node

import (
	"context"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/store"
)

// watermarkEvery is how often weightsnapd compares the store's filesystem
// with the high watermark: the kubelet's housekeeping interval.
const watermarkEvery = 10 * time.Second

// storeMetrics are the store's metrics as weightsnapd sees them: the
// evictions this process made (its builds and the watermark) and the
// store's bytes by state, read at each scrape.
type storeMetrics struct {
	evictions *prometheus.CounterVec
	bytes     *prometheus.Desc
	d         *store.Domain
}

func newStoreMetrics(d *store.Domain) *storeMetrics {
	m := &storeMetrics{d: d,
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "store",
			Name: "evictions_total", Help: "Artifacts this process evicted, by reason: capacity (a build needed the room), watermark, manual."}, []string{"reason"}),
		bytes: prometheus.NewDesc("weightsnap_store_bytes", "The store's bytes by state (each inode once): ready, pinned and leased (parts of ready), temp, quarantined, denied, free (the filesystem's).", []string{"state"}, nil),
	}
	for _, r := range []string{store.EvictCapacity, store.EvictWatermark, store.EvictManual, store.EvictUnneeded} {
		m.evictions.WithLabelValues(r)
	}
	d.OnEvict(func(e store.Evicted) { m.evictions.WithLabelValues(e.Reason).Inc() })
	return m
}

// Describe implements prometheus.Collector.
func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.evictions.Describe(ch)
	ch <- m.bytes
}

// Collect implements prometheus.Collector.
func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.evictions.Collect(ch)
	s, err := m.d.Bytes(context.Background())
	if err != nil {
		return
	}
	for state, n := range map[string]int64{"ready": s.Ready, "pinned": s.Pinned, "leased": s.Leased, "temp": s.Temp,
		"quarantined": s.Quarantined, "denied": s.Denied, "free": s.Free} {
		ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(n), state)
	}
}

// watchWatermark evicts down to the low watermark whenever the store's
// filesystem is past the high one, until ctx ends.
func watchWatermark(ctx context.Context, d *store.Domain) {
	t := time.NewTicker(watermarkEvery)
	defer t.Stop()
	for {
		rep, err := d.EvictToWatermark(ctx)
		switch {
		case err != nil:
			log.G(ctx).WithError(err).Warn("store watermark: eviction failed")
		case rep != nil && rep.Freed < rep.Need:
			log.G(ctx).WithField("need", rep.Need).WithField("freed", rep.Freed).WithField("held", len(rep.Held)).
				Warn("store watermark: the filesystem stays past the high watermark; what is left is pinned, leased or being built")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
