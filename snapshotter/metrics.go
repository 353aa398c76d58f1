package snapshotter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/resolve"
)

// Metrics are the snapshotter's Prometheus metrics.
type Metrics struct {
	prepares   *prometheus.CounterVec
	prepareDur *prometheus.HistogramVec
	resolveDur *prometheus.HistogramVec
	viewBytes  *prometheus.CounterVec
	fetched    *prometheus.CounterVec
	leasesHeld prometheus.Gauge
	fallbacks  prometheus.Counter

	repairs        *prometheus.CounterVec
	pendingRepairs prometheus.Gauge
	hostMounts     prometheus.Gauge

	// progress and progressTotal are the bytes each resolution in flight
	// has moved and will have moved, by identity.
	progress, progressTotal *prometheus.GaugeVec
}

// NewMetrics makes the metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	buckets := prometheus.ExponentialBuckets(0.001, 4, 10) // 1 ms .. 4.4 min
	return &Metrics{
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "prepares_total", Help: "Prepare calls by layer kind (weight, ordinary) and outcome."}, []string{"layer", "outcome"}),
		prepareDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "weight_prepare_seconds", Help: "Duration of weight layers' Prepare by outcome.", Buckets: buckets}, []string{"outcome"}),
		resolveDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "resolve_seconds", Help: "Duration of artifact resolutions by outcome (hit, fetched, failed).", Buckets: buckets}, []string{"outcome"}),
		viewBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "view_bytes_total", Help: "Artifact bytes placed in weight snapshots, by where the artifact came from (local, registry)."}, []string{"source"}),
		fetched: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "fetched_bytes_total", Help: "Artifact bytes resolutions moved into the store, by source."}, []string{"source"}),
		leasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "leases_held", Help: "Store artifacts leased while something uses them: active snapshots over weight snapshots (containers, image volumes, views), host mounts, Prepares in flight."}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "fallbacks_total", Help: "Weight layers unpacked as their empty pointer layer instead of the artifact (preferred mode)."}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "repairs_total", Help: "Background repairs by outcome: filled (a fallback got its weights), leased (an active snapshot or host mount got its lease), unresolved (a try whose artifact did not resolve), error."}, []string{"outcome"}),
		pendingRepairs: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "pending_repairs", Help: "Fallback snapshots waiting for their weights, and active snapshots and host mounts waiting for their lease."}),
		hostMounts: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "host_mounts", Help: "Host mounts (weightsnap mount)."}),
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "resolve_progress_bytes", Help: "Bytes fetched (or made) so far by each resolution in flight, by identity and source."}, []string{"identity", "source"}),
		progressTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "snapshotter",
			Name: "resolve_progress_total_bytes", Help: "Bytes each resolution in flight will have fetched (or made), by identity and source; 0 when unknown."}, []string{"identity", "source"}),
	}
}

// Register adds the metrics to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.prepares, m.prepareDur, m.resolveDur, m.viewBytes, m.fetched, m.leasesHeld, m.fallbacks, m.repairs, m.pendingRepairs, m.hostMounts, m.progress, m.progressTotal} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) ordinary(err error) {
	outcome := "ok"
	if err != nil {
		outcome = OutcomeError
	}
	m.prepares.WithLabelValues("ordinary", outcome).Inc()
}

func (m *Metrics) weight(outcome string, d time.Duration) {
	m.prepares.WithLabelValues("weight", outcome).Inc()
	m.prepareDur.WithLabelValues(outcome).Observe(d.Seconds())
}

func (m *Metrics) resolved(rep *resolve.Report, d time.Duration) {
	m.resolveDur.WithLabelValues(string(rep.Outcome)).Observe(d.Seconds())
	if rep.BytesMoved > 0 {
		m.fetched.WithLabelValues(rep.Source).Add(float64(rep.BytesMoved))
	}
}
