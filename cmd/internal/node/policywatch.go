package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weightsnap/weightsnap/trust"
)

// policyPoll is how often the policy watch reads the policy file.
const policyPoll = time.Second

// policyWatch reloads the trust policy file into the holder every decision
// reads. A file that cannot be read or parsed keeps the last good policy.
type policyWatch struct {
	path   string
	holder *trust.Holder

	errors  prometheus.Counter
	success prometheus.Gauge

	mu sync.Mutex
	// seen is the digest of the file last read, or the error that read
	// failed with: a state seen already is neither applied nor logged again.
	seen string
}

// newPolicyWatch reads the policy at path; it fails where the file does.
func newPolicyWatch(path string) (*policyWatch, error) {
	p, dgst, err := trust.ReadPolicy(path)
	if err != nil {
		return nil, fmt.Errorf("[verify] policy: %w", err)
	}
	w := &policyWatch{path: path, holder: trust.NewHolder(p), seen: dgst.String(),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "trust",
			Name: "policy_reload_errors_total", Help: "Reloads of the trust policy file that failed and kept the last good policy."}),
		success: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weightsnap", Subsystem: "trust",
			Name: "policy_last_reload_success", Help: "1 when the last read of the trust policy file applied it, 0 when it failed and the last good policy holds."}),
	}
	w.success.Set(1)
	return w, nil
}

// register registers the watch's metrics with reg.
func (w *policyWatch) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{w.errors, w.success} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// run reloads the policy every policyPoll until ctx ends.
func (w *policyWatch) run(ctx context.Context) {
	t := time.NewTicker(policyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.reload(ctx, false)
		}
	}
}

// reload reads the policy file and applies it when its bytes changed, or
// always when force is set (a SIGHUP: key files it names may have
// changed). A file that vanished or fails to parse keeps the last good
// policy: the failure is logged and counted once per distinct state, and
// returned.
func (w *policyWatch) reload(ctx context.Context, force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, dgst, err := trust.ReadPolicy(w.path)
	if err == nil && p.Unverified && !w.holder.Current().Unverified {
		// No file at the default path accepts everything: never the
		// policy a file that vanished leaves.
		err = fmt.Errorf("policy: %s is gone: %w", w.path, errdefs.ErrNotFound)
	}
	state := dgst.String()
	if dgst == "" && err != nil {
		state = err.Error()
	}
	if state == w.seen && !force {
		return nil
	}
	w.seen = state
	logger := log.G(ctx).WithField("policy", w.path).WithField("policy_digest", dgst.String())
	if err != nil {
		w.errors.Inc()
		w.success.Set(0)
		logger.WithError(err).Error("trust policy not reloaded: the last good policy holds")
		return err
	}
	w.holder.Set(p)
	w.success.Set(1)
	logger.Info("trust policy reloaded")
	return nil
}
