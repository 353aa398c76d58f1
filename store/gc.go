package store

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// GCReport says what a garbage collection removed.
type GCReport struct {
	Temps       Usage `json:"temps"`        // stale temp builds of dead builders
	Tombstones  Usage `json:"tombstones"`   // interrupted removals, finished
	Quarantined Usage `json:"quarantined"`  // quarantined entries past the policy age
	DenyMarkers int   `json:"deny_markers"` // markers of entries that no longer exist
}

// GC removes stale temp builds, finishes interrupted removals, drops
// quarantined entries older than the policy's quarantine_max_age_seconds and
// deny markers of absent entries. It never waits for a lock: an entry whose
// owner is alive is left alone.
func (d *Domain) GC(ctx context.Context) (*GCReport, error) {
	r := &GCReport{}
	r.Temps, r.Tombstones = d.cleanTemps(ctx, artifact.ID{}, false)
	maxAge := time.Duration(d.policy.QuarantineMaxAgeSeconds) * time.Second
	entries, err := os.ReadDir(d.path(dirQuarantine))
	if err != nil {
		return r, err
	}
	for _, e := range entries {
		// quarantine/<id>.<unix nanoseconds>
		_, stamp, _ := strings.Cut(e.Name(), ".")
		ns, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || time.Since(time.Unix(0, ns)) < maxAge {
			continue
		}
		p := d.path(dirQuarantine, e.Name())
		u := dirUsage(p)
		if removeTree(p) == nil {
			r.Quarantined.Count++
			r.Quarantined.Bytes += u.Bytes
		}
	}
	markers, _ := os.ReadDir(d.path(dirDeny))
	for _, m := range markers {
		id, err := artifact.ParseIDHex(m.Name())
		if err != nil {
			continue
		}
		if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); errors.Is(err, os.ErrNotExist) && d.unmark(id) == nil {
			r.DenyMarkers++
		}
	}
	return r, nil
}

// cleanTemps removes temp builds and cleanup tombstones whose owner is gone:
// those of id (the caller holds its build lock) and those of any other id
// whose build lock is free. keepOwn leaves id's temp builds for adoption.
func (d *Domain) cleanTemps(ctx context.Context, id artifact.ID, keepOwn bool) (temps, tombstones Usage) {
	entries, err := os.ReadDir(d.path(dirTmp))
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		tomb := strings.HasPrefix(name, ".cleanup.")
		owner, _, _ := strings.Cut(strings.TrimPrefix(name, ".cleanup."), ".")
		if !(artifact.IsSHA256Hex(owner) || strings.HasPrefix(owner, anonPrefix)) || (keepOwn && owner == id.Hex() && !tomb) {
			continue
		}
		var lk *lock
		if owner != id.Hex() {
			var ok bool
			if lk, ok, _ = tryLock(d.ownerLockPath(owner, "build"), unix.LOCK_EX); !ok {
				continue
			}
		}
		if strings.HasPrefix(owner, anonPrefix) {
			os.Remove(d.ownerLockPath(owner, "build"))
		}
		p := d.path(dirTmp, name)
		u := dirUsage(p)
		faultPoint("cleanup.before-remove")
		if err := removeTree(p); err == nil {
			log.G(ctx).WithField("entry", name).Info("removed stale temp build")
			acc := &temps
			if tomb {
				acc = &tombstones
			}
			acc.Count++
			acc.Bytes += u.Bytes
		}
		lk.Close()
	}
	return
}
