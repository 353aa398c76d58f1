package store

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/procs"
	"golang.org/x/sys/unix"
)

// Evicted is one artifact that Evict removed, with the bytes it gave back.
type Evicted struct {
	ID      artifact.ID `json:"id"`
	Bytes   int64       `json:"bytes_freed"`
	LastUse time.Time   `json:"last_use"`
	Reason  string      `json:"reason"`
	Seconds float64     `json:"seconds"` // from taking the locks to deleting the tombstone
}

// Held is an artifact that eviction may not take, with why.
type Held struct {
	ID    artifact.ID `json:"id"`
	Bytes int64       `json:"bytes"`
	Why   string      `json:"why"`
}

// HeldError is Evict's refusal of an artifact that something holds.
// It unwraps to errdefs.ErrFailedPrecondition.
type HeldError struct {
	ID  artifact.ID
	Why string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("artifact %s cannot be evicted: %s", e.ID.Short(), e.Why)
}

// Unwrap classifies the refusal.
func (e *HeldError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Use is how an artifact is used: its last use, pins, lease, build and bytes.
type Use struct {
	LastUse  time.Time `json:"last_use"`
	Pins     []Pin     `json:"pins,omitempty"`
	Leased   bool      `json:"leased"`
	Building bool      `json:"building,omitempty"`
	// Bytes is what its files occupy, each inode once.
	// Frees is the part that evicting it now gives back.
	// A file linked elsewhere too, by a weight snapshot or a view, keeps its bytes.
	Bytes int64 `json:"bytes"`
	Frees int64 `json:"frees_bytes"`
}

// Pinned says whether a holder pins it.
func (u *Use) Pinned() bool { return len(u.Pins) > 0 }

// UseOf says how id is used: last use, pins, lease and build, bytes.
func (d *Domain) UseOf(id artifact.ID) *Use {
	u := &Use{LastUse: d.LastUse(id)}
	u.Pins, _ = d.Pins(id)
	for _, h := range lockHolders(d.lockPath(id, "build"), d.lockPath(id, "artifact")) {
		switch {
		case h.Lock == id.Hex()+".build.lock":
			u.Building = true
		case h.Mode == "READ":
			u.Leased = true
		}
	}
	su := treeUsage(d.path(dirArtifacts, id.Hex()), nil)
	u.Bytes, u.Frees = su.Bytes, su.Frees
	return u
}

// Candidate is one READY artifact as an eviction policy sees it.
type Candidate struct {
	ID  artifact.ID
	Use Use
	// Held says why Evict refuses it (a pin, a build, a lease); empty when it does not.
	Held string
}

// Candidates lists the READY artifacts with their use and what holds them.
// It takes no lock: what it says may change before an eviction.
func (d *Domain) Candidates(ctx context.Context) ([]Candidate, error) {
	ids, err := d.ids()
	if err != nil {
		return nil, err
	}
	out := make([]Candidate, 0, len(ids))
	for _, id := range ids {
		if d.unready(id) != "" {
			continue // not READY: denied or unhardened, gc's to quarantine, never evicted
		}
		c := Candidate{ID: id, Use: *d.UseOf(id)}
		switch {
		case c.Use.Pinned():
			c.Held = "pinned by " + describePins(c.Use.Pins)
		case c.Use.Building:
			c.Held = "being built"
		case c.Use.Leased:
			c.Held = "leased" + describeHolders(lockHolders(d.lockPath(id, "artifact")))
		}
		out = append(out, c)
	}
	return out, nil
}

// Evict removes the READY artifact id for reason and says what it gave back.
// It never waits: it takes the build lock and the exclusive artifact lock
// without blocking. A build, a lease, a pin or a file linked outside the
// store refuses it with a *HeldError. The directory is renamed whole to a
// tombstone, then deleted (tombstone.go): a crash leaves the artifact READY
// and valid, or a tombstone that the next Open, gc, removal, eviction or
// build deletes. It also deletes the tombstones other removals left.
func (d *Domain) Evict(ctx context.Context, id artifact.ID, reason string) (*Evicted, error) {
	start := time.Now()
	bl, ok, err := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &HeldError{ID: id, Why: "being built"}
	}
	defer bl.Close()
	al, ok, err := tryLock(d.lockPath(id, "artifact"), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &HeldError{ID: id, Why: "leased" + describeHolders(lockHolders(d.lockPath(id, "artifact")))}
	}
	defer al.Close()
	var st unix.Stat_t
	if unix.Lstat(d.path(dirArtifacts, id.Hex()), &st) != nil || os.FileMode(st.Mode).Perm() != dirHardened || d.checkDenied(id) != nil {
		return nil, &HeldError{ID: id, Why: "not READY"}
	}
	// A pin is written under a lease (Pin), which the artifact lock excludes.
	pins, err := d.Pins(id)
	if err != nil {
		return nil, err
	}
	if len(pins) > 0 {
		return nil, &HeldError{ID: id, Why: "pinned by " + describePins(pins)}
	}
	u := treeUsage(d.path(dirArtifacts, id.Hex()), nil)
	if u.Frees < u.Bytes {
		return nil, &HeldError{ID: id, Why: "its files are linked outside the store"}
	}
	ev := &Evicted{ID: id, LastUse: d.LastUse(id), Reason: reason, Bytes: u.Frees}
	repo := ""
	if info, err := d.InspectArtifact(ctx, id); err == nil && info.Identity != nil {
		repo = info.Identity.Model.Repository
	}
	faultPoint("evict.locked")
	tomb, err := d.entomb(id, "evict")
	if err != nil {
		return nil, fmt.Errorf("evict %s: %w", id.Short(), err)
	}
	d.forgetUse(id)
	faultPoint("evict.before-delete")
	if err := removeTree(tomb); err != nil {
		log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("evicted artifact's tombstone left for the next open or gc")
	}
	d.finishRemovals(ctx, artifact.ID{})
	faultPoint("evict.after-delete")
	ev.Seconds = time.Since(start).Seconds()
	log.G(ctx).WithFields(log.Fields{"id": id.String(), "repository": repo, "freed_bytes": ev.Bytes,
		"last_use": ev.LastUse.UTC().Format(time.RFC3339), "reason": reason, "seconds": ev.Seconds}).Info("artifact evicted")
	return ev, nil
}

func describePins(pins []Pin) string {
	s := ""
	for i, p := range pins {
		if i > 0 {
			s += ", "
		}
		s += p.By
		if p.Reason != "" {
			s += fmt.Sprintf(" (%q)", p.Reason)
		}
	}
	return s
}

func describeHolders(hs []LockHolder) string {
	s := ""
	for i, h := range hs {
		if i == 0 {
			s += " by"
		} else {
			s += ","
		}
		s += " " + procs.Describe(h.PID).String()
	}
	return s
}
