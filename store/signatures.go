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

// dirSignatures holds signatures/<id>.json: how an artifact was verified
// against the trust policy (package trust's records: the signed manifest,
// its reference, the signatures and what they met). The store keeps the
// bytes and knows nothing of their meaning; a record is written before
// the artifact is published (while its remote source was planned) and
// removed with it (rm, eviction, quarantine) or, left by a build that
// never published, by gc.
const dirSignatures = "signatures"

// Signatures is the signature record of id: nil when there is none.
func (d *Domain) Signatures(id artifact.ID) ([]byte, error) {
	raw, err := artifact.ReadFileAtMost(d.path(dirSignatures, id.Hex()+".json"), artifact.MaxRecordsBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, artifact.ErrFileTooLarge):
		return nil, fmt.Errorf("signature record of %s %w: %w", id.Short(), err, errdefs.ErrDataLoss)
	}
	return raw, err
}

// EditSignatures rewrites id's signature record under locks/signatures.lock.
// edit gets the record (nil for none, or for a corrupt one) and returns the new one; nil removes it.
// The record is replaced atomically and durably.
func (d *Domain) EditSignatures(ctx context.Context, id artifact.ID, edit func([]byte) ([]byte, error)) error {
	return d.editArtifactFile(ctx, "signatures", d.path(dirSignatures, id.Hex()+".json"), func() ([]byte, error) {
		old, err := d.Signatures(id)
		if err != nil && !errdefs.IsDataLoss(err) { // a corrupt record is replaced
			return nil, err
		}
		raw, err := edit(old)
		if err != nil || raw == nil {
			return nil, err
		}
		if len(raw) > artifact.MaxRecordsBytes {
			return nil, fmt.Errorf("signature record of %s: %d bytes, more than %d: %w", id.Short(), len(raw), artifact.MaxRecordsBytes, errdefs.ErrInvalidArgument)
		}
		return raw, nil
	})
}

// dropSignatures removes id's signature record, durably.
func (d *Domain) dropSignatures(id artifact.ID) error {
	err := os.Remove(d.path(dirSignatures, id.Hex()+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the signature record of %s: %w", id.Short(), err)
	}
	return syncDir(d.path(dirSignatures))
}

// orphanSignatureAge is how old the record of an artifact that is not in
// the store must be before gc removes it: a record is written while its
// source is planned, before the build lock is taken.
const orphanSignatureAge = time.Hour

// orphanSignatures removes the records of artifacts that are not in the
// store, that no build holds and that were written more than
// orphanSignatureAge ago; it returns how many it removed.
func (d *Domain) orphanSignatures() int {
	entries, _ := os.ReadDir(d.path(dirSignatures))
	n := 0
	for _, e := range entries {
		hex, ok := strings.CutSuffix(e.Name(), ".json")
		id, err := artifact.ParseIDHex(hex)
		if !ok || err != nil {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < orphanSignatureAge {
			continue
		}
		if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		bl, free, err := tryLock(d.lockPath(id, "build"), unix.LOCK_EX)
		if err != nil || !free {
			continue // a build of it is running
		}
		if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); errors.Is(err, fs.ErrNotExist) && d.dropSignatures(id) == nil {
			n++
		}
		bl.Close()
	}
	return n
}
