package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// dirRecords holds signatures/<id>.json, an artifact's trust records: how
// it was verified against the trust policy (package trust's records: the
// signed manifest, its reference, the signatures and what they met). The store keeps the
// bytes and knows nothing of their meaning; a record is written before
// the artifact is published (while its remote source was planned) and
// removed with it (rm, eviction, quarantine) or, left by a build that
// never published, by gc.
const dirRecords = "signatures"

// Records is the trust record of id: nil when there is none.
func (d *Domain) Records(id artifact.ID) ([]byte, error) {
	raw, err := artifact.ReadFileAtMost(d.path(dirRecords, id.Hex()+".json"), artifact.MaxRecordsBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, artifact.ErrFileTooLarge):
		return nil, fmt.Errorf("trust record of %s %w: %w", id.Short(), err, errdefs.ErrDataLoss)
	}
	return raw, err
}

// EditRecords rewrites id's trust record under locks/signatures.lock.
// edit gets the record (nil for none, or for a corrupt one) and returns the new one; nil removes it.
// The record is replaced atomically and durably.
func (d *Domain) EditRecords(ctx context.Context, id artifact.ID, edit func([]byte) ([]byte, error)) error {
	return d.editArtifactFile(ctx, "signatures", d.path(dirRecords, id.Hex()+".json"), func() ([]byte, error) {
		old, err := d.Records(id)
		if err != nil && !errdefs.IsDataLoss(err) { // a corrupt record is replaced
			return nil, err
		}
		raw, err := edit(old)
		if err != nil || raw == nil {
			return nil, err
		}
		if len(raw) > artifact.MaxRecordsBytes {
			return nil, fmt.Errorf("trust record of %s: %d bytes, more than %d: %w", id.Short(), len(raw), artifact.MaxRecordsBytes, errdefs.ErrInvalidArgument)
		}
		return raw, nil
	})
}

// dropRecords removes id's trust record, durably.
func (d *Domain) dropRecords(id artifact.ID) error {
	err := os.Remove(d.path(dirRecords, id.Hex()+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the trust record of %s: %w", id.Short(), err)
	}
	return syncDir(d.path(dirRecords))
}

// orphanRecordAge is how old the record of an artifact that is not in
// the store must be before gc removes it: a record is written while its
// source is planned, before the build lock is taken.
const orphanRecordAge = time.Hour

// orphanRecords removes the records of artifacts that are not in the
// store, that no build holds and that were written more than
// orphanRecordAge ago; it returns how many it removed.
func (d *Domain) orphanRecords() int {
	entries, _ := os.ReadDir(d.path(dirRecords))
	n := 0
	for _, e := range entries {
		hex, ok := strings.CutSuffix(e.Name(), ".json")
		id, err := artifact.ParseIDHex(hex)
		if !ok || err != nil {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < orphanRecordAge {
			continue
		}
		if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		bl, free, err := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
		if err != nil || !free {
			continue // a build of it is running
		}
		if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); errors.Is(err, fs.ErrNotExist) && d.dropRecords(id) == nil {
			n++
		}
		bl.Close()
	}
	return n
}
