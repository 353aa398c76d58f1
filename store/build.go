package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// BuildResult says how GetOrBuild got its lease.
type BuildResult struct {
	Built   bool          // this call ran the producer
	Waited  time.Duration // time spent waiting for another process's build
	Produce time.Duration // time the producer and publication took
}

// GetOrBuild returns a lease on the artifact of identity, running the
// producer if no valid artifact exists. Across processes exactly one build
// of an identity runs at a time; the others wait, within the coordination
// timeout, and then get the same artifact. A waiter never breaks another
// process's build lock. A build that lacks room lets go of the build lock,
// asks the domain's RoomMaker and runs the producer again.
func (d *Domain) GetOrBuild(ctx context.Context, identity artifact.Identity, p artifact.Producer) (*Lease, BuildResult, error) {
	var res BuildResult
	if err := d.failedErr(); err != nil {
		return nil, res, err
	}
	if err := identity.Validate(); err != nil {
		return nil, res, err
	}
	id, err := identity.ID()
	if err != nil {
		return nil, res, err
	}
	if l, err := d.Lookup(ctx, id, ""); err == nil || !isRebuildable(err) {
		return l, res, err
	}
	l, err := d.buildWithRoom(ctx, id, func() (*Lease, error) {
		deadline := time.Now().Add(d.policy.CoordinationTimeout())
		return d.publishLocked(ctx, id, deadline, true, &res, func() error {
			start := time.Now()
			if err := d.produce(ctx, identity, id, p, deadline); err != nil {
				return err
			}
			res.Produce = time.Since(start)
			return nil
		})
	})
	return l, res, err
}

// publishLocked is the one sequence every publication goes through. It
// takes id's build lock, so that across processes one build of an identity
// runs at a time (waiting within deadline, never breaking another's lock);
// leases a valid artifact already published there, without calling
// publish; otherwise quarantines an invalid or denied one, removes the
// stale temp builds of id (keepOwn keeps id's own, for a build that adopts
// what an interrupted one completed), calls publish and leases what it
// published. res gets the lock wait and whether publish ran and succeeded.
func (d *Domain) publishLocked(ctx context.Context, id artifact.ID, deadline time.Time, keepOwn bool, res *BuildResult, publish func() error) (*Lease, error) {
	start := time.Now()
	bl, err := lockFile(ctx, d.lockPath(id, "build"), unix.LOCK_EX, deadline, "the build lock of "+id.Short())
	if err != nil {
		return nil, err
	}
	defer bl.Close()
	res.Waited = time.Since(start)
	if l, err := d.Lookup(ctx, id, ""); err == nil || !isRebuildable(err) {
		return l, err
	}
	if err := d.clearInvalid(ctx, id, deadline); err != nil {
		return nil, err
	}
	d.cleanTemps(ctx, id, keepOwn, nil)
	if err := publish(); err != nil {
		return nil, err
	}
	res.Built = true
	return d.Lookup(ctx, id, "")
}

// interrupted says whether a producer was stopped rather than wrong: a
// cancelled call or a transfer that may succeed later. Its temp build stays,
// so the next build of the same identity can reuse what it completed.
func interrupted(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errdefs.IsUnavailable(err)
}

// isRebuildable says whether a failed lookup leaves room for a build.
func isRebuildable(err error) bool {
	return errors.Is(err, ErrMiss) || IsInvalid(err)
}

func (d *Domain) produce(ctx context.Context, identity artifact.Identity, id artifact.ID, p artifact.Producer, deadline time.Time) error {
	b, err := d.newBuild(ctx, identity, id, id.Hex())
	if err != nil {
		return err
	}
	b.adoptStale()
	if err := p.Produce(ctx, b); err != nil {
		err = fmt.Errorf("producer %s: %w", p.Name(), err)
		if re := (*roomError)(nil); errors.As(err, &re) {
			b.release() // kept for the build that runs once the room is made
			return err
		}
		if !interrupted(err) {
			b.abort()
			return err
		}
		// Kept for the next build of this identity to reuse or continue.
		return &InterruptedError{ID: id, Kept: b.release(), Err: err}
	}
	// Whatever wrote them (a copy, a pull, a peer fetch), the files of a
	// passthrough identity must be its source fingerprint.
	if err := identity.CheckPassthrough(b.entries()); err != nil {
		b.abort()
		return err
	}
	if err := b.publish(ctx, p.Name(), deadline); err != nil {
		b.abort()
		return fmt.Errorf("publish %s: %w", id.Short(), err)
	}
	return nil
}

// clearInvalid quarantines a denied or invalid artifacts/<id> under the
// exclusive artifact lock. The caller holds the build lock.
func (d *Domain) clearInvalid(ctx context.Context, id artifact.ID, deadline time.Time) error {
	_, statErr := os.Lstat(d.path(dirArtifacts, id.Hex()))
	if errors.Is(statErr, os.ErrNotExist) {
		return d.unmark(id) // a stale marker; an error if it cannot be cleared
	}
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_EX, deadline, "the artifact lock of invalid "+id.Short())
	if err != nil {
		return err
	}
	defer lk.Close()
	return d.quarantine(ctx, id, "invalid or denied; rebuilding")
}
