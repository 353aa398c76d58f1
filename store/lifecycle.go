package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// The lifecycle of an entry: READY -> denied -> quarantined -> explicit
// removal. A lookup that finds an entry invalid denies it (deny/<id>) before
// it releases its shared lock; a build owner later quarantines it under the
// exclusive lock. When the marker cannot be written, the directory itself
// carries the invalidation mode (not dirHardened), which every reader checks.

// denyRecord is the content of deny/<id>.
type denyRecord struct {
	Reason string `json:"reason"`
	Time   string `json:"time"`
	PID    int    `json:"pid"`
}

func (d *Domain) checkDenied(id artifact.ID) error {
	raw, err := os.ReadFile(d.path(dirDeny, id.Hex()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var rec denyRecord
	if err != nil || json.Unmarshal(raw, &rec) != nil {
		rec.Reason = "deny marker present"
	}
	return &DeniedError{ID: id, Reason: rec.Reason}
}

// recheck runs before a lease is returned: no deny marker, and the directory
// is still the validated inode in the hardened mode.
func (d *Domain) recheck(id artifact.ID, ino uint64) error {
	if err := d.checkDenied(id); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(d.path(dirArtifacts, id.Hex()), &st); err != nil {
		return ErrMiss
	}
	if st.Ino != ino || os.FileMode(st.Mode).Perm() != dirHardened {
		return &DeniedError{ID: id, Reason: "invalidation mode set by another reader"}
	}
	return nil
}

// unmark removes the deny marker of id durably: a marker that came back
// after a power cut would deny the artifact published after it.
func (d *Domain) unmark(id artifact.ID) error {
	err := os.Remove(d.path(dirDeny, id.Hex()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncDir(d.path(dirDeny))
}

// deny writes the external deny marker deny/<id>.
func (d *Domain) deny(ctx context.Context, id artifact.ID, reason string) error {
	faultPoint("deny.before-marker")
	raw, _ := json.Marshal(denyRecord{Reason: reason, Time: time.Now().UTC().Format(time.RFC3339), PID: os.Getpid()})
	if err := artifact.WriteFileAtomic(d.path(dirDeny, id.Hex()), raw, 0o644, artifact.Durable); err != nil {
		return storageErr("write deny marker", err)
	}
	faultPoint("deny.after-marker")
	log.G(ctx).WithField("id", id.Short()).WithField("reason", reason).Warn("artifact denied")
	return nil
}

// invalidate handles a lookup's invalid finding while it holds the shared
// lock lk, which it releases. With the deny marker written it returns the
// finding. Without it, it sets the invalidation mode on the directory, makes
// a bounded attempt to quarantine the entry (keeping a publication that
// replaced it meanwhile) and returns a retryable storage failure; if neither
// marker persists, the domain fails.
func (d *Domain) invalidate(ctx context.Context, id artifact.ID, finding *InvalidError, lk *lock) error {
	derr := d.deny(ctx, id, finding.Error())
	if derr == nil {
		lk.Close()
		return finding
	}
	ino, merr := d.setInvalidationMode(id)
	lk.Close()
	if merr != nil {
		return d.fail(errors.Join(derr, merr))
	}
	wait := min(time.Second, d.policy.CoordinationTimeout())
	if xl, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_EX, time.Now().Add(wait), "the artifact lock of "+id.Short()); err == nil {
		var st unix.Stat_t
		if unix.Lstat(d.path(dirArtifacts, id.Hex()), &st) == nil && st.Ino == ino {
			if qerr := d.quarantine(ctx, id, "invalid; deny marker could not be written"); qerr != nil {
				log.G(ctx).WithError(qerr).Warn("quarantine after a failed deny marker")
			}
		}
		xl.Close()
	}
	return errors.Join(finding, derr)
}

// setInvalidationMode durably sets the invalidation mode on artifacts/<id>
// and returns the directory's inode.
func (d *Domain) setInvalidationMode(id artifact.ID) (uint64, error) {
	fd, err := unix.Open(d.path(dirArtifacts, id.Hex()), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open for invalidation: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return 0, fmt.Errorf("set invalidation mode: %w", err)
	}
	if err := unix.Fsync(fd); err != nil {
		return 0, fmt.Errorf("sync invalidation mode: %w", err)
	}
	return st.Ino, nil
}

// fail records that the domain can no longer mark invalid entries.
func (d *Domain) fail(err error) error {
	fe := domainFailed(d.root, err)
	d.failed.CompareAndSwap(nil, &fe)
	return fe
}

func (d *Domain) failedErr() error {
	if fe := d.failed.Load(); fe != nil {
		return *fe
	}
	return nil
}

// moveOut moves the invalid artifacts/<id> to dst in quarantine/: the
// invalidation mode is set durably first, the rename is made durable by
// syncing both parents, and only then is the moved directory re-hardened.
// The caller holds the exclusive artifact lock.
func (d *Domain) moveOut(id artifact.ID, dst string) error {
	if _, err := d.setInvalidationMode(id); err != nil {
		return err
	}
	faultPoint("quarantine.after-mode")
	if err := os.Rename(d.path(dirArtifacts, id.Hex()), dst); err != nil {
		return fmt.Errorf("move %s: %w", id.Short(), err)
	}
	faultPoint("quarantine.after-rename")
	if err := syncDir(d.path(dirArtifacts)); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	faultPoint("quarantine.after-sync")
	// The record of how it was verified goes with it (a crash before this
	// leaves it to gc).
	if err := d.dropRecords(id); err != nil {
		return err
	}
	return os.Chmod(dst, dirHardened)
}

// quarantine moves artifacts/<id> to quarantine/ and clears its deny marker.
// The caller holds the exclusive artifact lock.
func (d *Domain) quarantine(ctx context.Context, id artifact.ID, why string) error {
	if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); err == nil {
		dst := d.path(dirQuarantine, fmt.Sprintf("%s.%d", id.Hex(), time.Now().UnixNano()))
		if err := d.moveOut(id, dst); err != nil {
			return fmt.Errorf("quarantine %s: %w", id.Short(), err)
		}
	}
	if err := d.unmark(id); err != nil {
		return err
	}
	faultPoint("quarantine.after-unmark")
	log.G(ctx).WithField("id", id.Short()).WithField("why", why).Info("artifact quarantined")
	return nil
}
