package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// GCReport says what a garbage collection removed, and which interrupted
// builds it kept.
type GCReport struct {
	Temps       Usage       `json:"temps"`        // stale temp builds of dead builders
	Tombstones  Usage       `json:"tombstones"`   // interrupted removals, finished
	Cleared     Usage       `json:"cleared"`      // denied or invalid artifacts, moved to quarantine
	Quarantined Usage       `json:"quarantined"`  // quarantined entries past the policy age
	DenyMarkers int         `json:"deny_markers"` // markers of entries that no longer exist
	Signatures  int         `json:"signatures"`   // signature records of entries that no longer exist
	Removed     []TempBuild `json:"removed_builds"`
	Kept        []TempBuild `json:"kept_builds"`
}

// TempBuild is one temp build of a builder that is gone.
type TempBuild struct {
	Name       string      `json:"name"`              // its directory under tmp/
	ID         artifact.ID `json:"identity,omitzero"` // the artifact it builds; zero for an import's
	Bytes      int64       `json:"bytes"`             // on disk
	AgeSeconds float64     `json:"age_seconds"`       // since it last wrote
	Reason     string      `json:"reason"`            // why it was removed or kept
}

// GCOptions tune GC.
type GCOptions struct {
	// All removes interrupted builds however young (the policy's
	// stale_build_seconds keeps them otherwise).
	All bool
}

// GC removes what the store no longer needs.
//
// It removes stale temp builds and finishes interrupted removals. It moves
// denied artifacts, and those an interrupted publication or quarantine left
// without the hardened mode, to quarantine. It drops quarantined entries
// older than quarantine_max_age_seconds, and the deny markers and signature
// records of absent entries. An interrupted build is
// kept for the next build of its artifact to continue, until it is older
// than stale_build_seconds or o.All is set. GC never waits for a lock: an
// entry whose owner is alive is left alone.
func (d *Domain) GC(ctx context.Context, o GCOptions) (*GCReport, error) {
	r := &GCReport{Removed: []TempBuild{}, Kept: []TempBuild{}}
	tb := tempBuilds{all: o.All}
	r.Temps, r.Tombstones = d.cleanTemps(ctx, artifact.ID{}, false, &tb)
	r.Removed, r.Kept = append(r.Removed, tb.removed...), append(r.Kept, tb.kept...)
	faultPoint("gc.after-temps")
	r.Cleared = d.clearUnready(ctx)
	faultPoint("gc.after-clear")
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
	faultPoint("gc.after-quarantine")
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
	r.Signatures = d.orphanRecords()
	return r, nil
}

// tempBuilds is what cleanTemps did with the temp builds of builders that
// are gone: with all, it keeps none.
type tempBuilds struct {
	all           bool
	removed, kept []TempBuild
}

// cleanTemps removes temp builds and cleanup tombstones whose owner is gone:
// those of id (the caller holds its build lock) and those of any other id
// whose build lock is free. keepOwn leaves id's temp builds for adoption.
// An interrupted build of another artifact is kept until it is older than
// the policy's stale_build_seconds, unless tb says all.
func (d *Domain) cleanTemps(ctx context.Context, id artifact.ID, keepOwn bool, tb *tempBuilds) (temps, tombstones Usage) {
	tombstones = d.finishRemovals(ctx, id)
	entries, err := os.ReadDir(d.path(dirTmp))
	if err != nil {
		return
	}
	if tb == nil {
		tb = &tempBuilds{}
	}
	stale := time.Duration(d.policy.StaleBuildSeconds) * time.Second
	for _, e := range entries {
		name := e.Name()
		owner, _, _ := strings.Cut(name, ".")
		if !(artifact.IsSHA256Hex(owner) || strings.HasPrefix(owner, anonPrefix)) || (keepOwn && owner == id.Hex()) {
			continue // a tombstone (finishRemovals) or not a temp build
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
		t := TempBuild{Name: name, Bytes: u.Bytes, AgeSeconds: time.Since(lastWrite(p)).Seconds()}
		if oid, err := artifact.ParseIDHex(owner); err == nil {
			t.ID = oid
		}
		if !t.ID.IsZero() && owner != id.Hex() {
			// An interrupted build of an artifact: the next pull or fetch
			// of it continues from what it kept.
			switch age := time.Duration(t.AgeSeconds * float64(time.Second)); {
			case tb.all:
				t.Reason = "interrupted build; gc --all"
			case age < stale:
				t.Reason = fmt.Sprintf("interrupted build, resumable: kept for %s more (stale_build_seconds %d; gc --all removes it)",
					(stale - age).Round(time.Second), d.policy.StaleBuildSeconds)
				tb.kept = append(tb.kept, t)
				lk.Close()
				continue
			default:
				t.Reason = fmt.Sprintf("interrupted build, older than stale_build_seconds %d", d.policy.StaleBuildSeconds)
			}
		}
		if t.Reason == "" {
			switch {
			case owner == id.Hex():
				t.Reason = "temp build of this build's artifact, not adopted"
			default:
				t.Reason = "temp build of an import that stopped"
			}
		}
		faultPoint("cleanup.before-remove")
		// A temp build becomes a tombstone first, so a crash part-way
		// through its deletion leaves nothing a build would adopt.
		tomb := d.path(dirTmp, tombstoneName(owner))
		if os.Rename(p, tomb) != nil {
			lk.Close()
			continue
		}
		faultPoint("cleanup.after-tombstone")
		if err := removeTree(tomb); err == nil {
			log.G(ctx).WithField("entry", name).WithField("reason", t.Reason).Info("removed stale temp build")
			temps.Count++
			temps.Bytes += u.Bytes
			tb.removed = append(tb.removed, t)
		}
		lk.Close()
	}
	return
}

// lastWrite is when a temp build last changed: the newest modification
// time in its tree.
func lastWrite(dir string) time.Time {
	var last time.Time
	filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
		return nil
	})
	return last
}

// clearUnready moves to quarantine each artifact that is denied, or that
// lacks the hardened mode while no build holds it (a publication or a
// quarantine that stopped part-way), and says what it moved. It takes
// each artifact's locks without waiting and leaves one whose locks are held.
func (d *Domain) clearUnready(ctx context.Context) Usage {
	var moved Usage
	ids, _ := d.ids()
	for _, id := range ids {
		why := d.unready(id)
		if why == "" {
			continue
		}
		bl, ok, _ := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
		if !ok {
			continue
		}
		if al, ok, _ := tryLock(d.lockPath(id, "artifact"), unix.LOCK_EX); ok {
			p := d.path(dirArtifacts, id.Hex())
			u := dirUsage(p)
			if why = d.unready(id); why != "" {
				if err := d.quarantine(ctx, id, why+"; gc"); err != nil {
					log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("gc could not quarantine an artifact that is not READY")
				} else {
					moved.Count++
					moved.Bytes += u.Bytes
				}
			}
			al.Close()
		}
		bl.Close()
	}
	return moved
}

// unready says why artifacts/<id> is not READY by its marks (a deny marker,
// a mode other than the hardened one); empty when it carries neither.
func (d *Domain) unready(id artifact.ID) string {
	if err := d.checkDenied(id); err != nil {
		return err.Error()
	}
	var st unix.Stat_t
	if err := unix.Lstat(d.path(dirArtifacts, id.Hex()), &st); err != nil {
		return ""
	}
	if mode := os.FileMode(st.Mode).Perm(); mode != dirHardened {
		return fmt.Sprintf("directory mode %o is not the hardened %o", mode, dirHardened)
	}
	return ""
}
