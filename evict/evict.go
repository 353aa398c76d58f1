package evict

import (
	"cmp"
	"context"
	"slices"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

// Request says how much room to make and why.
type Request struct {
	Need   int64       // bytes to free
	Reason string      // Capacity, Watermark, Manual, Unneeded
	DryRun bool        // plan only: say what would go
	Except artifact.ID // never this one (the build making room)
	// Partial evicts what it can when the candidates cannot free Need
	// (the watermark, gc --evict); a build's room is all or nothing.
	Partial bool
}

// Report is what an eviction took, or would take. Its lists are empty,
// never nil, when they hold nothing.
type Report struct {
	Need    int64           `json:"need_bytes"`
	Freed   int64           `json:"freed_bytes"`
	Evicted []store.Evicted `json:"evicted"`
	DryRun  bool            `json:"dry_run,omitempty"`
	Held    []store.Held    `json:"held"` // what eviction may not take
}

// Evict evicts unleased, unpinned READY artifacts, least recently used
// first, until req.Need bytes are free. When the candidates cannot free
// Need together it evicts nothing and returns a *store.CapacityError naming
// what holds the rest, unless req.Partial. Each artifact goes through the
// releaser, then the store's Evict.
func (p *Policy) Evict(ctx context.Context, req Request) (*Report, error) {
	rep := &Report{Need: req.Need, DryRun: req.DryRun, Evicted: []store.Evicted{}, Held: []store.Held{}}
	if req.Need <= 0 {
		return rep, nil
	}
	cands, held, err := p.plan(ctx, req.Except)
	if err != nil {
		return rep, err
	}
	var could int64
	for _, c := range cands {
		could += c.Use.Frees
	}
	rep.Held = heldOf(held)
	if could < req.Need && !req.Partial {
		return rep, &store.CapacityError{Limit: "eviction", Need: req.Need, Have: could, Reclaimable: could, Held: rep.Held, Checked: true}
	}
	for _, c := range cands {
		if rep.Freed >= req.Need {
			break
		}
		if req.DryRun {
			rep.Evicted = append(rep.Evicted, store.Evicted{ID: c.ID, Bytes: c.Use.Frees, LastUse: c.Use.LastUse, Reason: req.Reason})
			rep.Freed += c.Use.Frees
			continue
		}
		ev, err := p.evictOne(ctx, c, req.Reason)
		if err != nil {
			log.G(ctx).WithError(err).WithField("id", c.ID.Short()).Debug("eviction skipped")
			continue
		}
		rep.Evicted = append(rep.Evicted, *ev)
		rep.Freed += ev.Bytes
	}
	if rep.Freed < req.Need && !req.Partial {
		return rep, &store.CapacityError{Limit: "eviction", Need: req.Need, Have: rep.Freed, Reclaimable: rep.Freed, Held: rep.Held, Checked: true}
	}
	return rep, nil
}

// plan lists the READY artifacts: the candidates, least recently used
// first, apart from those held (pinned, leased, being built, linked outside
// the store with no releaser to let go of the links).
func (p *Policy) plan(ctx context.Context, except artifact.ID) (cands, held []store.Candidate, err error) {
	all, err := p.d.Candidates(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range all {
		if c.ID == except {
			continue
		}
		c.Use.Frees = p.Frees(c.Use)
		if c.Held == "" && c.Use.Frees < c.Use.Bytes {
			c.Held = "linked by weight snapshots or views, evicting it frees " + bytefmt.IEC(c.Use.Frees)
		}
		if c.Held != "" {
			held = append(held, c)
		} else {
			cands = append(cands, c)
		}
	}
	slices.SortStableFunc(cands, func(a, b store.Candidate) int { return a.Use.LastUse.Compare(b.Use.LastUse) })
	return cands, held, nil
}

// Frees is what evicting an artifact of use u gives back. With a releaser,
// which lets go of the links outside the store first, it is the artifact's
// whole size.
func (p *Policy) Frees(u store.Use) int64 {
	if p.releaser.Load() != nil {
		return u.Bytes
	}
	return u.Frees
}

// evictOne has the releaser let go of c's outside links, when it has any,
// then evicts it and counts the eviction.
func (p *Policy) evictOne(ctx context.Context, c store.Candidate, reason string) (*store.Evicted, error) {
	if r := p.releaser.Load(); r != nil && p.d.UseOf(c.ID).Frees < c.Use.Bytes {
		if err := (*r).Release(ctx, c.ID); err != nil {
			// What it did let go of counts: the store's Evict says whether the links are gone.
			log.G(ctx).WithError(err).WithField("id", c.ID.Short()).Warn("evict: not every link outside the store was released")
		}
	}
	ev, err := p.d.Evict(ctx, c.ID, reason)
	if err != nil {
		return nil, err
	}
	p.evictions.WithLabelValues(reason).Inc()
	if p.onEvict != nil {
		p.onEvict(*ev)
	}
	return ev, nil
}

func heldOf(cs []store.Candidate) []store.Held {
	out := make([]store.Held, 0, len(cs))
	for _, c := range cs {
		out = append(out, store.Held{ID: c.ID, Bytes: c.Use.Bytes, Why: c.Held})
	}
	slices.SortStableFunc(out, func(a, b store.Held) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return out
}
