package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
)

// Capacity before download and room made by eviction. A producer that
// knows the artifact's size from its manifest (a pull, a peer fetch, an
// import of a fingerprinted source) reserves it before its first payload
// byte (artifact.Reserver): the build fails at once, evicting nothing,
// when even every allowed eviction could not make the room, and otherwise
// evicts what it needs first. A producer that does not reserve meets the
// same eviction in each file's preflight.

// Reserve implements artifact.Writer: room for total payload bytes.
func (b *build) Reserve(total int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	more := total - b.total
	if more <= 0 {
		return nil
	}
	if p := b.d.policy; p.MaxArtifactBytes > 0 && total > p.MaxArtifactBytes {
		return &CapacityError{Limit: "max_artifact_bytes", Need: total, Have: p.MaxArtifactBytes, Artifact: b.id, Size: total}
	}
	ce, need, err := b.shortfall(more)
	if err != nil || need <= 0 {
		return err
	}
	ce.Artifact, ce.Size = b.id, total
	return b.makeRoom(ce, need)
}

// shortfall is how many bytes the store lacks for more bytes, by the limit
// that lacks the most, with that limit's refusal.
func (b *build) shortfall(more int64) (ce *CapacityError, need int64, err error) {
	p := b.d.policy
	if p.MaxStoreBytes > 0 {
		used := b.d.storeBytes()
		if n := used + more - p.MaxStoreBytes; n > need {
			ce, need = &CapacityError{Limit: "max_store_bytes", Need: used + more, Have: p.MaxStoreBytes}, n
		}
	}
	_, free, err := b.d.fsSpace()
	if err != nil {
		return nil, 0, err
	}
	if n := more + p.MinFreeBytes - free; n > need {
		ce, need = &CapacityError{Limit: "min_free_bytes", Need: more + p.MinFreeBytes, Have: free}, n
	}
	return ce, need, nil
}

// roomFor runs after a file's preflight refused it (ce): with eviction on,
// it evicts what the file lacks and says whether to check again.
func (b *build) roomFor(ce *CapacityError, size int64) error {
	var need int64
	switch ce.Limit {
	case "max_store_bytes":
		need = b.total + size - b.budget
	case "min_free_bytes":
		need = ce.Need - ce.Have
	default:
		return ce
	}
	ce.Artifact = b.id
	return b.makeRoom(ce, need)
}

// makeRoom evicts need bytes for the build, or returns ce with what the
// store found: eviction off, or what could be freed and what holds the
// rest (Evict takes nothing unless its candidates can free all of need).
// The caller holds b.mu.
func (b *build) makeRoom(ce *CapacityError, need int64) error {
	ce.Checked = true
	if !b.d.policy.evicts() {
		ce.Eviction = EvictionOff
		return ce
	}
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := b.d.Evict(ctx, EvictRequest{Need: need, Reason: EvictCapacity, Except: b.id})
	var ee *CapacityError
	if errors.As(err, &ee) {
		ce.Reclaimable, ce.Held = ee.Reclaimable, ee.Held
		return ce
	}
	if err != nil {
		return err
	}
	if p := b.d.policy; p.MaxStoreBytes > 0 && b.budget >= 0 {
		// This build's files are among the store's bytes: what it may take
		// in all is the limit less everything else.
		left := p.MaxStoreBytes - b.d.storeBytes() + b.total
		if p.MaxArtifactBytes > 0 {
			left = min(left, p.MaxArtifactBytes)
		}
		b.budget = max(left, b.budget+rep.Freed)
	}
	return nil
}

// detail is the part of a capacity error that says what eviction could do
// and what to do.
func (e *CapacityError) detail() string {
	var s strings.Builder
	switch {
	case !e.Artifact.IsZero() && e.Size > 0:
		fmt.Fprintf(&s, "; artifact %s needs %s", e.Artifact.Short(), bytefmt.IEC(e.Size))
	case e.Size > 0:
		fmt.Fprintf(&s, "; the artifact needs %s", bytefmt.IEC(e.Size))
	}
	if e.Eviction == EvictionOff {
		s.WriteString("; eviction is off ([store] eviction = \"off\"): remove artifacts (weightsnap rm), raise the limit or free space on the store's filesystem")
		return s.String()
	}
	fmt.Fprintf(&s, "; eviction could free %s", bytefmt.IEC(e.Reclaimable))
	if len(e.Held) > 0 {
		s.WriteString("; held:")
		for i, h := range e.Held {
			if i > 0 {
				s.WriteString(",")
			}
			fmt.Fprintf(&s, " %s (%s, %s)", h.ID.Short(), bytefmt.IEC(h.Bytes), h.Why)
		}
	}
	s.WriteString("; to make room: unpin (weightsnap unpin ID) or stop what leases them, raise max_store_bytes, or give the store's filesystem more space")
	return s.String()
}

var _ artifact.Writer = (*build)(nil)
