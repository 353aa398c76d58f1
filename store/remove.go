package store

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Remove deletes an artifact explicitly. It never waits: an active build or
// lease is refused with a *BusyError naming its holders, and nothing is
// unlinked. The directory is first renamed to a tombstone
// (tombstone.go), so an interrupted removal is finished by the next Open,
// gc, removal, eviction or build.
func (d *Domain) Remove(ctx context.Context, id artifact.ID) error {
	if id.IsZero() {
		return fmt.Errorf("no artifact id: %w", errdefs.ErrInvalidArgument)
	}
	bl, ok, err := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
	if err != nil {
		return err
	}
	if !ok {
		return &BusyError{ID: id, What: "build", Holders: lockHolders(d.lockPath(id, "build"))}
	}
	defer bl.Close()
	al, ok, err := tryLock(d.lockPath(id, "artifact"), unix.LOCK_EX)
	if err != nil {
		return err
	}
	if !ok {
		return &BusyError{ID: id, What: "lease", Holders: lockHolders(d.lockPath(id, "artifact"))}
	}
	defer al.Close()
	if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); errors.Is(err, os.ErrNotExist) {
		d.unmark(id)
		return ErrMiss
	}
	if pins, err := d.Pins(id); err != nil || len(pins) > 0 {
		return errors.Join(err, fmt.Errorf("artifact %s is pinned by %s: unpin it first (weightsnap unpin): %w", id.Short(), describePins(pins), errdefs.ErrFailedPrecondition))
	}
	tomb, err := d.entomb(id, "remove")
	if err != nil {
		return fmt.Errorf("remove %s: %w", id.Short(), err)
	}
	d.forgetUse(id)
	if err := d.unmark(id); err != nil {
		return err
	}
	if err := removeTree(tomb); err != nil {
		log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("removed artifact's tombstone left for the next open or gc")
	}
	d.cleanTemps(ctx, id, false, nil)
	log.G(ctx).WithField("id", id.Short()).Info("artifact removed")
	return nil
}
