package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/internal/ioerr"
)

// Capacity before download and room made by eviction. A producer that
// knows the artifact's size from its manifest (a pull, a peer fetch, an
// import of a fingerprinted source) reserves it before its first payload
// byte (artifact.Reserver). A producer that does not reserve meets the
// same check in each file's preflight. A build that lacks room stops with
// a *roomError; the build's caller lets go of the build lock, asks the
// domain's RoomMaker for the room and builds again, continuing what the
// stopped build kept.

// RoomMaker makes room in the store for a build: the eviction policy.
type RoomMaker interface {
	// MakeRoom frees need bytes without taking except, the artifact being built.
	// It is called with none of the store's locks held.
	// It refuses with a *CapacityError saying what could be freed and what holds the rest.
	MakeRoom(ctx context.Context, need int64, except artifact.ID) error
}

// SetRoomMaker makes the domain's builds ask r for the room they lack.
func (d *Domain) SetRoomMaker(r RoomMaker) { d.room.Store(&r) }

// roomError is a build stopped for lack of room that a RoomMaker may make.
type roomError struct {
	ce   *CapacityError
	need int64 // bytes to free
}

func (e *roomError) Error() string { return e.ce.Error() }
func (e *roomError) Unwrap() error { return e.ce }

// maxRoomTries bounds how often a build asks for room and starts again.
const maxRoomTries = 3

// Reserve implements artifact.Writer: room for total payload bytes.
func (b *build) Reserve(total int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	more := total - b.total
	if more <= 0 {
		return nil
	}
	if p := b.d.policy; p.MaxArtifactBytes > 0 && total > int64(p.MaxArtifactBytes) {
		return &CapacityError{Limit: "max_artifact_bytes", Need: total, Have: int64(p.MaxArtifactBytes), Artifact: b.id, Size: total}
	}
	ce, need, err := b.shortfall(more)
	if err != nil || need <= 0 {
		return err
	}
	ce.Artifact, ce.Size = b.id, total
	return b.lacks(ce, need)
}

// shortfall is how many bytes the store lacks for more bytes, by the limit
// that lacks the most, with that limit's refusal.
func (b *build) shortfall(more int64) (ce *CapacityError, need int64, err error) {
	p := b.d.policy
	if p.MaxStoreBytes > 0 {
		used := b.d.UsedBytes()
		if n := used + more - int64(p.MaxStoreBytes); n > need {
			ce, need = &CapacityError{Limit: "max_store_bytes", Need: used + more, Have: int64(p.MaxStoreBytes)}, n
		}
	}
	_, free, err := b.d.FilesystemSpace()
	if err != nil {
		return nil, 0, err
	}
	if n := more + int64(p.MinFreeBytes) - free; n > need {
		ce, need = &CapacityError{Limit: "min_free_bytes", Need: more + int64(p.MinFreeBytes), Have: free}, n
	}
	return ce, need, nil
}

// roomFor runs after a file's preflight refused it (ce): it says how many
// bytes the file lacks.
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
	return b.lacks(ce, need)
}

// lacks stops the build for need bytes: a *roomError when the domain has a
// RoomMaker, else ce.
func (b *build) lacks(ce *CapacityError, need int64) error {
	if b.d.room.Load() == nil {
		return ce
	}
	return &roomError{ce: ce, need: need}
}

// makeRoom asks the domain's RoomMaker for the room a stopped build lacks.
// The caller holds no lock of the build. When eviction cannot make it, the
// interrupted builds of other artifacts whose builders are gone give their
// bytes back, and the build runs again. A refusal is the build's
// *CapacityError with what the RoomMaker found and what holds the rest.
func (d *Domain) makeRoom(ctx context.Context, re *roomError, except artifact.ID) error {
	ce := re.ce
	ce.Checked = true
	err := (*d.room.Load()).MakeRoom(ctx, re.need, except)
	var ee *CapacityError
	if !errors.As(err, &ee) {
		return err
	}
	if temps, tombstones := d.cleanTemps(ctx, except, true, &tempBuilds{all: true}); temps.Bytes+tombstones.Bytes > 0 {
		log.G(ctx).WithFields(log.Fields{"count": temps.Count + tombstones.Count, "bytes": temps.Bytes + tombstones.Bytes}).Info("interrupted builds and removals removed to make room")
		return nil
	}
	ce.Reclaimable, ce.Held, ce.Eviction = ee.Reclaimable, ee.Held, ee.Eviction
	ce.Rest = d.holding(ctx)
	return ce
}

// Holding is a part of the store's filesystem that eviction cannot free, with what frees it.
type Holding struct {
	What    string `json:"what"`
	Bytes   int64  `json:"bytes"`
	FreedBy string `json:"freed_by"`
}

// holding is what holds the store's filesystem apart from READY artifacts:
// the store's other states, and files outside the store.
func (d *Domain) holding(ctx context.Context) []Holding {
	r, err := d.InspectDomain(ctx)
	if err != nil {
		return nil
	}
	var out []Holding
	for _, s := range r.States {
		if s.State != "ready" && s.State != "metadata" && s.Bytes > 0 {
			out = append(out, Holding{What: s.State, Bytes: s.Bytes, FreedBy: s.FreedBy})
		}
	}
	if total, free, err := d.FilesystemSpace(); err == nil {
		if outside := total - free - r.TotalBytes; outside > 0 {
			out = append(out, Holding{What: "outside the store", Bytes: outside, FreedBy: "removing other files on the store's filesystem (its own reserve included)"})
		}
	}
	return out
}

// preallocFailed is a file's failed preallocation of size bytes. Out of
// space, it stops the build for the room the file lacks, as preflight does:
// concurrent builds may each pass preflight and together not fit.
func (b *build) preallocFailed(err error, size int64) error {
	var ce *CapacityError
	if !errors.As(ioerr.Classify(err, noSpace), &ce) {
		return err
	}
	_, free, serr := b.d.FilesystemSpace()
	if serr != nil {
		return errors.Join(ce, serr)
	}
	ce.Need, ce.Have, ce.Artifact = size+int64(b.d.policy.MinFreeBytes), free, b.id
	return b.lacks(ce, ce.Need-ce.Have)
}

// roomOf is the room a build that stopped with err lacks: its *roomError,
// or, with a RoomMaker, a write that met a full filesystem. Where the
// shortfall is unknown it asks for one byte, so at least one artifact goes.
func (d *Domain) roomOf(err error) *roomError {
	var re *roomError
	if errors.As(err, &re) {
		return re
	}
	var ce *CapacityError
	if d.room.Load() == nil || !errors.As(err, &ce) || ce.Limit != "ENOSPC" {
		return nil
	}
	return &roomError{ce: ce, need: max(ce.Need-ce.Have, 1)}
}

// buildWithRoom runs build, and again after the room it lacked is made,
// up to maxRoomTries times.
func (d *Domain) buildWithRoom(ctx context.Context, except artifact.ID, build func() (*Lease, error)) (*Lease, error) {
	for try := 1; ; try++ {
		l, err := build()
		re := d.roomOf(err)
		if re == nil {
			return l, err
		}
		if try == maxRoomTries {
			return nil, re.ce
		}
		if err := d.makeRoom(ctx, re, except); err != nil {
			return nil, err
		}
	}
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
	if e.Eviction == "off" {
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
	if len(e.Rest) > 0 {
		s.WriteString("; the rest of the filesystem:")
		for i, h := range e.Rest {
			if i > 0 {
				s.WriteString(",")
			}
			fmt.Fprintf(&s, " %s %s (freed by %s)", h.What, bytefmt.IEC(h.Bytes), h.FreedBy)
		}
	}
	s.WriteString(e.advice())
	return s.String()
}

// advice is what an operator can do to make the room: unpin or stop the
// holders when something holds the space, and raise the limit that
// refused, or free the filesystem when space on it lacks.
func (e *CapacityError) advice() string {
	var ways []string
	if len(e.Held) > 0 {
		ways = append(ways, "unpin (weightsnap unpin ID) or stop what leases them")
	}
	switch e.Limit {
	case "max_store_bytes":
		ways = append(ways, "raise max_store_bytes")
	case "min_free_bytes", "ENOSPC":
		ways = append(ways, "give the store's filesystem more space")
	}
	if len(ways) == 0 {
		return ""
	}
	return "; to make room: " + strings.Join(ways, ", or ")
}

var _ artifact.Writer = (*build)(nil)
