package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"os"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/procs"
	"golang.org/x/sys/unix"
)

// Eviction modes ([store] eviction).
const (
	// EvictionLRU evicts unleased, unpinned READY artifacts, least recently
	// used first, when a build would cross max_store_bytes or min_free_bytes.
	EvictionLRU = "lru"
	// EvictionOff refuses such a build.
	EvictionOff = "off"
)

// Why an artifact was evicted (the reason label of
// weightsnap_store_evictions_total).
const (
	EvictCapacity  = "capacity"  // a build needed the room
	EvictWatermark = "watermark" // the filesystem was past the high watermark
	EvictManual    = "manual"    // weightsnap gc --evict
	EvictUnneeded  = "unneeded"  // the kubelet removed the last image that needs it, the filesystem past the low watermark
)

func (p Policy) validateEviction() error {
	switch {
	case p.Eviction != "" && p.Eviction != EvictionLRU && p.Eviction != EvictionOff:
		return fmt.Errorf("policy: unknown eviction %q (want lru or off): %w", p.Eviction, errdefs.ErrInvalidArgument)
	case p.HighWatermarkPercent < 0 || p.HighWatermarkPercent > 100 || p.LowWatermarkPercent < 0 || p.LowWatermarkPercent > 100:
		return fmt.Errorf("policy: watermarks are percents from 0 to 100: %w", errdefs.ErrInvalidArgument)
	case p.HighWatermarkPercent > 0 && p.LowWatermarkPercent > p.HighWatermarkPercent:
		return fmt.Errorf("policy: low_watermark_percent %d is above high_watermark_percent %d: %w", p.LowWatermarkPercent, p.HighWatermarkPercent, errdefs.ErrInvalidArgument)
	}
	return nil
}

// evicts says whether the policy lets builds evict.
func (p Policy) evicts() bool { return p.Eviction != EvictionOff }

// Releaser gives back the links to an artifact's files that live outside
// the store (weightsnapd: unused images and weight snapshots), so that
// evicting it frees its bytes. It is called before the artifact's locks
// are taken, and must leave alone whatever is in use.
type Releaser interface {
	Release(ctx context.Context, id artifact.ID) error
}

// Releasers release in order, every one of them even when one before it
// failed (the next may give back what the failed one left).
type Releasers []Releaser

// Release calls each releaser in order and joins their errors.
func (rs Releasers) Release(ctx context.Context, id artifact.ID) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.Release(ctx, id))
	}
	return errors.Join(errs...)
}

// Evicted is one artifact eviction took.
type Evicted struct {
	ID      artifact.ID `json:"id"`
	Bytes   int64       `json:"bytes_freed"`
	LastUse time.Time   `json:"last_use"`
	Reason  string      `json:"reason"`
	Seconds float64     `json:"seconds"` // the eviction's time, locks to deleted tombstone
}

// EvictRequest says how much room to make.
type EvictRequest struct {
	Need   int64       // bytes to free
	Reason string      // EvictCapacity, EvictWatermark, EvictManual, EvictUnneeded
	DryRun bool        // plan only: say what would go
	Except artifact.ID // never this one (the build making room)
	// Partial evicts what it can when the candidates cannot free Need
	// (the watermark, gc --evict); a build's room is all or nothing.
	Partial bool
}

// EvictReport is what an eviction took, or would take.
type EvictReport struct {
	Need    int64     `json:"need_bytes"`
	Freed   int64     `json:"freed_bytes"`
	Evicted []Evicted `json:"evicted"`
	DryRun  bool      `json:"dry_run,omitempty"`
	Held    []Held    `json:"held,omitempty"` // what eviction may not take
}

// Use is how an artifact is used, as eviction sees it.
type Use struct {
	LastUse  time.Time `json:"last_use"`
	Pins     []Pin     `json:"pins,omitempty"`
	Leased   bool      `json:"leased"`
	Building bool      `json:"building,omitempty"`
	// Bytes is what its files occupy, each inode once; Frees is what
	// evicting it now would give back (files linked elsewhere too, by a
	// weight snapshot or a view, keep their bytes until those go).
	Bytes int64 `json:"bytes"`
	Frees int64 `json:"frees_bytes"`
}

// Pinned says whether a holder pins it.
func (u *Use) Pinned() bool { return len(u.Pins) > 0 }

// candidate is an artifact of the plan with what holds it, if anything.
type candidate struct {
	id   artifact.ID
	use  Use
	held string // why it cannot go; "" for an eviction candidate
}

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

// plan lists the READY artifacts, eviction candidates (least recently used
// first) apart from those held (pinned, leased, being built, denied).
func (d *Domain) plan(ctx context.Context, except artifact.ID) (cands, held []candidate, err error) {
	ids, err := d.ids()
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		if id == except {
			continue
		}
		c := candidate{id: id, use: *d.UseOf(id)}
		if d.releaser.Load() != nil {
			c.use.Frees = c.use.Bytes // the releaser gives back the outside links
		}
		switch {
		case d.checkDenied(id) != nil:
			continue // not READY: quarantine's evidence, never evicted
		case c.use.Pinned():
			c.held = "pinned by " + describePins(c.use.Pins)
		case c.use.Building:
			c.held = "being built"
		case c.use.Leased:
			c.held = "leased" + describeHolders(lockHolders(d.lockPath(id, "artifact")))
		case c.use.Frees < c.use.Bytes:
			// Evicting it would give back only what no other link holds.
			c.held = "linked by weight snapshots or views, evicting it frees " + bytefmt.IEC(c.use.Frees)
		}
		if c.held != "" {
			held = append(held, c)
		} else {
			cands = append(cands, c)
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return a.use.LastUse.Compare(b.use.LastUse) })
	return cands, held, nil
}

// Evict evicts unleased, unpinned READY artifacts, least recently used
// first, until req.Need bytes are free. When the candidates cannot free
// Need together it evicts nothing and returns a *CapacityError naming what
// holds the rest. Each eviction is crash-safe: the artifact is moved whole
// to a tombstone under its exclusive locks (READY, or gone).
func (d *Domain) Evict(ctx context.Context, req EvictRequest) (*EvictReport, error) {
	rep := &EvictReport{Need: req.Need, DryRun: req.DryRun}
	if req.Need <= 0 {
		return rep, nil
	}
	cands, held, err := d.plan(ctx, req.Except)
	if err != nil {
		return rep, err
	}
	var could int64
	for _, c := range cands {
		could += c.use.Frees
	}
	rep.Held = heldOf(held)
	if could < req.Need && !req.Partial {
		return rep, &CapacityError{Limit: "eviction", Need: req.Need, Have: could, Reclaimable: could, Held: heldOf(held), Checked: true}
	}
	for _, c := range cands {
		if rep.Freed >= req.Need {
			break
		}
		if req.DryRun {
			rep.Evicted = append(rep.Evicted, Evicted{ID: c.id, Bytes: c.use.Frees, LastUse: c.use.LastUse, Reason: req.Reason})
			rep.Freed += c.use.Frees
			continue
		}
		ev, err := d.evictOne(ctx, c.id, req.Reason)
		if err != nil {
			log.G(ctx).WithError(err).WithField("id", c.id.Short()).Debug("eviction skipped")
			continue
		}
		rep.Evicted = append(rep.Evicted, *ev)
		rep.Freed += ev.Bytes
	}
	if rep.Freed < req.Need && !req.Partial {
		return rep, &CapacityError{Limit: "eviction", Need: req.Need, Have: rep.Freed, Reclaimable: rep.Freed, Held: heldOf(held), Checked: true}
	}
	return rep, nil
}

// errNotEvictable is a candidate that became busy, pinned or not READY
// since the plan.
var errNotEvictable = fmt.Errorf("no longer evictable: %w", errdefs.ErrFailedPrecondition)

// evictOne evicts one artifact under its build lock and exclusive artifact
// lock, never waiting for either: the directory is moved to a tombstone
// (moveOut: invalidation mode, rename, both parents synced) and the
// tombstone deleted; a crash leaves the artifact READY or a tombstone that
// the next cleanup finishes.
func (d *Domain) evictOne(ctx context.Context, id artifact.ID, reason string) (*Evicted, error) {
	if u := treeUsage(d.path(dirArtifacts, id.Hex()), nil); u.Frees < u.Bytes {
		r := d.releaser.Load()
		if r == nil {
			return nil, errNotEvictable
		}
		if err := (*r).Release(ctx, id); err != nil {
			// What it did release counts: the check under the locks
			// below says whether the links are gone.
			log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("evict: not every link outside the store was released")
		}
	}
	start := time.Now()
	bl, ok, err := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
	if !ok {
		return nil, errors.Join(errNotEvictable, err)
	}
	defer bl.Close()
	al, ok, err := tryLock(d.lockPath(id, "artifact"), unix.LOCK_EX)
	if !ok {
		return nil, errors.Join(errNotEvictable, err)
	}
	defer al.Close()
	var st unix.Stat_t
	if unix.Lstat(d.path(dirArtifacts, id.Hex()), &st) != nil || os.FileMode(st.Mode).Perm() != dirHardened || d.checkDenied(id) != nil {
		return nil, errNotEvictable
	}
	// A pin is written under a lease (Pin), which this lock excludes.
	if pins, err := d.Pins(id); err != nil || len(pins) > 0 {
		return nil, errors.Join(errNotEvictable, err)
	}
	u := treeUsage(d.path(dirArtifacts, id.Hex()), nil)
	if u.Frees < u.Bytes {
		// Something outside the store still links its files (a weight
		// snapshot the releaser left, being in use or not its to remove):
		// evicting it would free next to nothing.
		return nil, fmt.Errorf("%w: its files are linked outside the store", errNotEvictable)
	}
	ev := &Evicted{ID: id, LastUse: d.LastUse(id), Reason: reason, Bytes: u.Frees}
	repo := ""
	if info, err := d.InspectArtifact(ctx, id); err == nil && info.Identity != nil {
		repo = info.Identity.Model.Repository
	}
	faultPoint("evict.locked")
	var rnd [6]byte
	rand.Read(rnd[:])
	tomb := d.path(dirTmp, ".cleanup."+id.Hex()+"."+hex.EncodeToString(rnd[:]))
	if err := d.moveOut(id, tomb, "evict", false); err != nil {
		return nil, fmt.Errorf("evict %s: %w", id.Short(), err)
	}
	d.forgetUse(id)
	faultPoint("evict.before-delete")
	if err := removeTree(tomb); err != nil {
		log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("evicted artifact's tombstone left for gc")
	}
	faultPoint("evict.after-delete")
	ev.Seconds = time.Since(start).Seconds()
	log.G(ctx).WithFields(log.Fields{"id": id.String(), "repository": repo, "bytes_freed": ev.Bytes,
		"last_use": ev.LastUse.UTC().Format(time.RFC3339), "reason": reason, "seconds": ev.Seconds}).Info("artifact evicted")
	if d.onEvict != nil {
		d.onEvict(*ev)
	}
	return ev, nil
}

// SetReleaser makes evictions give back the links outside the store
// (weightsnapd's weight snapshots and images) first.
func (d *Domain) SetReleaser(r Releaser) { d.releaser.Store(&r) }

// OnEvict calls fn after every eviction (the daemon's metrics). Call it
// once, before the domain is shared.
func (d *Domain) OnEvict(fn func(Evicted)) { d.onEvict = fn }

// Demote makes id the first eviction candidate (its last use the epoch):
// nothing on the node needs it any more, such as when the kubelet removed
// the last image that needs it. Its next use records a time again.
func (d *Domain) Demote(id artifact.ID) error {
	p := d.path(dirUses, id.Hex())
	os.Mkdir(d.path(dirUses), 0o755)
	if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		f.Close()
	}
	return os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0))
}

// EvictToWatermark evicts, when the store's filesystem is fuller than the
// policy's high watermark, down to its low watermark (as the kubelet's
// image garbage collection does). It reports nil when nothing was needed.
func (d *Domain) EvictToWatermark(ctx context.Context) (*EvictReport, error) {
	return d.evictPast(ctx, d.policy.HighWatermarkPercent, EvictWatermark)
}

// EvictUnneeded evicts, when the store's filesystem is fuller than the
// policy's low watermark, down to it: called once the kubelet removed the
// last image that needs an artifact (Demote made it the first candidate),
// which the kubelet does to get that space back. It reports nil when
// nothing was needed.
func (d *Domain) EvictUnneeded(ctx context.Context) (*EvictReport, error) {
	return d.evictPast(ctx, d.policy.LowWatermarkPercent, EvictUnneeded)
}

// evictPast evicts, when the store's filesystem is fuller than percent
// (0: never), down to the low watermark.
func (d *Domain) evictPast(ctx context.Context, percent int, reason string) (*EvictReport, error) {
	p := d.policy
	if !p.evicts() || percent == 0 {
		return nil, nil
	}
	total, free, err := d.fsSpace()
	if err != nil || total == 0 {
		return nil, err
	}
	used := total - free
	if used*100 <= total*int64(percent) {
		return nil, nil
	}
	return d.Evict(ctx, EvictRequest{Need: used - total*int64(p.LowWatermarkPercent)/100, Reason: reason, Partial: true})
}

// EvictTo evicts until the store holds at most target bytes (each inode
// once), for `weightsnap gc --evict --to`.
func (d *Domain) EvictTo(ctx context.Context, target int64, dryRun bool) (*EvictReport, error) {
	return d.Evict(ctx, EvictRequest{Need: d.storeBytes() - target, Reason: EvictManual, DryRun: dryRun, Partial: true})
}

// EvictToPolicy evicts until the store is within max_store_bytes and
// min_free_bytes and the filesystem under the high watermark (down to the
// low one), for `weightsnap gc --evict`.
func (d *Domain) EvictToPolicy(ctx context.Context, dryRun bool) (*EvictReport, error) {
	p := d.policy
	total, free, err := d.fsSpace()
	if err != nil {
		return nil, err
	}
	var need int64
	if p.MaxStoreBytes > 0 {
		need = max(need, d.storeBytes()-p.MaxStoreBytes)
	}
	need = max(need, p.MinFreeBytes-free)
	if p.HighWatermarkPercent > 0 && (total-free)*100 > total*int64(p.HighWatermarkPercent) {
		need = max(need, total-free-total*int64(p.LowWatermarkPercent)/100)
	}
	return d.Evict(ctx, EvictRequest{Need: need, Reason: EvictManual, DryRun: dryRun, Partial: true})
}

// Held is an artifact that eviction may not take, and why.
type Held struct {
	ID    artifact.ID `json:"id"`
	Bytes int64       `json:"bytes"`
	Why   string      `json:"why"`
}

func heldOf(cs []candidate) []Held {
	out := make([]Held, 0, len(cs))
	for _, c := range cs {
		out = append(out, Held{ID: c.id, Bytes: c.use.Bytes, Why: c.held})
	}
	slices.SortStableFunc(out, func(a, b Held) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return out
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
