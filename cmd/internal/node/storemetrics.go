package node

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/store"
)

// storeMetrics is the store's bytes by state, read at each scrape.
type storeMetrics struct {
	bytes *prometheus.Desc
	d     *store.Domain
}

func newStoreMetrics(d *store.Domain) *storeMetrics {
	return &storeMetrics{d: d,
		bytes: prometheus.NewDesc("weightsnap_store_bytes", "The store's bytes by state (each inode once): ready, pinned and leased (parts of ready), temp, quarantined, denied, free (the filesystem's).", []string{"state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.bytes
}

// Collect implements prometheus.Collector.
func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	s, err := m.d.Bytes(context.Background())
	if err != nil {
		return
	}
	for state, n := range map[string]int64{"ready": s.Ready, "pinned": s.Pinned, "leased": s.Leased, "temp": s.Temp,
		"quarantined": s.Quarantined, "denied": s.Denied, "free": s.Free} {
		ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(n), state)
	}
}
