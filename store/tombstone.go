package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// A removal (Remove, Evict) takes an artifact out of the store with one
// rename: artifacts/<id> becomes the tombstone artifacts/.cleanup.<id>.<random>
// beside it, made durable by a sync of artifacts/. The tombstone keeps its
// parent, so the rename needs no change of the directory's mode, and the
// artifact is READY and valid up to the rename. No lookup sees a tombstone.
// Its deletion is the removal's, or, after a crash, the next Open's, gc's,
// removal's, eviction's or build's, of any artifact. A gc that removes a
// temp build renames it to a tombstone in tmp/ the same way first.

// tombstonePrefix starts the name of a tombstone: .cleanup.<owner>.<random>.
const tombstonePrefix = ".cleanup."

// tombstoneName is a new tombstone's name for owner (an artifact's hex or an import's anon name).
func tombstoneName(owner string) string {
	var rnd [6]byte
	rand.Read(rnd[:])
	return tombstonePrefix + owner + "." + hex.EncodeToString(rnd[:])
}

// tombstoneOwner is the owner named by a tombstone's name; ok is false for any other name.
func tombstoneOwner(name string) (owner string, ok bool) {
	rest, ok := strings.CutPrefix(name, tombstonePrefix)
	if !ok {
		return "", false
	}
	owner, _, _ = strings.Cut(rest, ".")
	return owner, artifact.IsSHA256Hex(owner) || strings.HasPrefix(owner, anonPrefix)
}

// entomb renames artifacts/<id> to a new tombstone beside it, durably, and
// returns the tombstone's path. The caller holds id's build lock and
// exclusive artifact lock; step names its fault points.
func (d *Domain) entomb(id artifact.ID, step string) (string, error) {
	tomb := d.path(dirArtifacts, tombstoneName(id.Hex()))
	if err := os.Rename(d.path(dirArtifacts, id.Hex()), tomb); err != nil {
		return "", fmt.Errorf("move %s to its tombstone: %w", id.Short(), err)
	}
	faultPoint(step + ".after-rename")
	if err := syncDir(d.path(dirArtifacts)); err != nil {
		return "", err
	}
	faultPoint(step + ".after-sync")
	// The record of how it was verified goes with it (a crash before this
	// leaves it to gc).
	return tomb, d.dropRecords(id)
}

// finishRemovals deletes the tombstones of artifacts/ and tmp/ whose
// removal stopped: those of own (the caller holds its build lock) and those
// whose owner's build lock is free. It says what they held.
func (d *Domain) finishRemovals(ctx context.Context, own artifact.ID) Usage {
	var done Usage
	for _, dir := range []string{dirArtifacts, dirTmp} {
		entries, _ := os.ReadDir(d.path(dir))
		for _, e := range entries {
			owner, ok := tombstoneOwner(e.Name())
			if !ok {
				continue
			}
			var lk *lock
			if owner != own.Hex() {
				if lk, ok, _ = tryLock(d.ownerLockPath(owner, "build"), unix.LOCK_EX); !ok {
					continue
				}
			}
			if strings.HasPrefix(owner, anonPrefix) {
				os.Remove(d.ownerLockPath(owner, "build"))
			}
			p := d.path(dir, e.Name())
			u := dirUsage(p)
			if err := removeTree(p); err == nil {
				done.Count++
				done.Bytes += u.Bytes
				log.G(ctx).WithFields(log.Fields{"entry": dir + "/" + e.Name(), "bytes": u.Bytes}).Info("finished an interrupted removal")
			}
			lk.Close()
		}
	}
	return done
}
