package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/store"
)

// How weightsnapd answered for the store a command reads, as the JSON
// field "daemon" says it.
const (
	daemonAnswered    = "answered"    // it serves this store and answered
	daemonUnreachable = "unreachable" // its control socket did not answer
	daemonOff         = "off"         // no control socket is configured
	daemonOtherStore  = "other_store" // it serves another store
)

// storeDaemon is weightsnapd as a command that reads a store finds it:
// the client when it serves that store, else why the command speaks for
// the store alone.
type storeDaemon struct {
	c      *control.Client // nil unless it answered for the store
	status string
	why    string // why it does not answer for the store; "" when it does
}

// storeDaemon asks weightsnapd, briefly, whether it serves d.
func (a *app) storeDaemon(ctx context.Context, d *store.Domain) storeDaemon {
	c, err := a.control()
	if err != nil {
		return storeDaemon{status: daemonOff, why: err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	si, err := c.Store(pctx)
	if err != nil {
		return storeDaemon{status: daemonUnreachable, why: err.Error()}
	}
	if !sameDir(si.Root, d.Root()) {
		return storeDaemon{status: daemonOtherStore, why: fmt.Sprintf("weightsnapd on %s serves the store at %s, not %s", a.cfg.Snapshotter.ControlAddress, si.Root, d.Root())}
	}
	return storeDaemon{c: c, status: daemonAnswered}
}

// alone makes sd the store alone for why: the daemon answered the probe
// and then failed.
func (sd *storeDaemon) alone(err error) {
	sd.c, sd.status, sd.why = nil, daemonUnreachable, err.Error()
}

// note says on stderr, once, that what the command shows is the store's
// alone: without weightsnapd its releasers do not count.
func (sd storeDaemon) note(a *app, what string) {
	if sd.c != nil {
		return
	}
	fmt.Fprintf(a.errOut, "weightsnap: %s speaks for the store alone (%s); weightsnapd would first empty the weight snapshots that link an artifact, and its leases are unknown here\n", what, sd.why)
}

// sameDir says whether a and b name one directory.
func sameDir(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// What is known of an artifact's leases, as the JSON field "leases" says it.
const (
	leasesHeld    = "held"    // the store or weightsnapd holds a lease
	leasesNone    = "none"    // neither does
	leasesUnknown = "unknown" // the store holds none, and weightsnapd did not answer
)

// daemonArtifact is what weightsnapd says of one artifact, for inspect.
type daemonArtifact struct {
	Status  string           `json:"daemon"`
	Leases  string           `json:"leases"`
	Holders *control.Holders `json:"weightsnapd,omitempty"`
	why     string
}

// daemonArtifact asks weightsnapd what holds info's artifact and how its
// eviction sees it, which replaces info's use where it answers.
func (a *app) daemonArtifact(ctx context.Context, d *store.Domain, info *store.ArtifactInfo) daemonArtifact {
	sd := a.storeDaemon(ctx, d)
	var da daemonArtifact
	if sd.c != nil {
		h, err := sd.c.Holders(ctx, info.ID)
		var list []*store.ArtifactInfo
		if err == nil {
			err = sd.c.Use(ctx, &list)
		}
		if err != nil {
			sd.alone(err)
		} else {
			da.Holders = h
		}
		for _, l := range list {
			if l.ID == info.ID && l.Use != nil {
				info.Use = l.Use
			}
		}
	}
	da.Status, da.why = sd.status, sd.why
	switch {
	case (info.Use != nil && info.Use.Leased) || (da.Holders != nil && da.Holders.Leased):
		da.Leases = leasesHeld
	case sd.c != nil:
		da.Leases = leasesNone
	default:
		da.Leases = leasesUnknown
	}
	return da
}
