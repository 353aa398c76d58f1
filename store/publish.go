package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// Modes of a published artifact. A directory in artifacts/ that is not
// hardened to dirHardened carries the invalidation mode: readers treat it as
// invalid. The staging rename carries the temp build's 0700 through, and
// hardening clears it only after the rename.
const (
	dirHardened  os.FileMode = 0o555
	fileHardened os.FileMode = 0o444
)

// publish seals the build (manifest, index, READY.json last, all synced),
// renames it into artifacts/ under the exclusive artifact lock, hardens it and
// syncs the parents. A competing publication that is already valid wins.
func (b *build) publish(ctx context.Context, producer string, deadline time.Time) error {
	if err := b.dropResume(); err != nil {
		return err
	}
	if err := b.dropProgress(); err != nil {
		return err
	}
	entries := make([]artifact.FileEntry, 0, len(b.files))
	b.startSyncs()
	for _, w := range b.files {
		if !w.closed {
			return fmt.Errorf("payload %s was never closed: %w", w.path, errdefs.ErrFailedPrecondition)
		}
		if err := <-w.synced; err != nil {
			return fmt.Errorf("sync %s: %w", w.path, err)
		}
		w.synced = nil
		if w.err != nil {
			return w.err
		}
		entries = append(entries, w.entry)
	}
	if err := b.closeCheckpoints(true); err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("producer %s wrote no files: %w", producer, errdefs.ErrFailedPrecondition)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	id, err := b.identity.ID()
	if err != nil {
		return err
	}
	idx := &artifact.Index{Schema: artifact.IndexSchema, ID: id, Files: entries}
	m := Manifest{Schema: ManifestSchema, Identity: b.identity, ID: id, TotalBytes: idx.TotalBytes()}
	for _, e := range entries {
		m.Files = append(m.Files, e.File)
	}
	idxRaw, err := idx.Encode()
	if err != nil {
		return err
	}
	manRaw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ready := Ready{Schema: ReadySchema, ID: id, ManifestSHA256: sha256Hex(manRaw),
		IndexSHA256: sha256Hex(idxRaw), Producer: producer, Created: time.Now().UTC().Format(time.RFC3339Nano)}
	readyRaw, _ := json.Marshal(ready)
	faultPoint("publish.before-seal")
	for _, f := range []struct {
		name, fault string
		data        []byte
	}{{fileManifest, "publish.after-manifest", manRaw}, {fileIndex, "publish.after-index", idxRaw}, {fileReady, "publish.after-ready", readyRaw}} {
		if err := writeSynced(filepath.Join(b.dir, f.name), f.data); err != nil {
			return err
		}
		faultPoint(f.fault)
	}
	if err := syncTree(b.dir); err != nil {
		return err
	}
	return b.d.install(ctx, b.dir, b.id, ready.IndexSHA256, deadline)
}

// install moves a sealed temp build to artifacts/<id> under the exclusive
// artifact lock, hardens it and syncs both parents. A competing publication
// that is valid with the same index wins without a failure; one with other
// content is an identity collision; one that cannot be read stays
// authoritative behind a retryable storage failure. Any failure after the
// rename is contained in quarantine before PUBLICATION_FAILED is returned.
func (d *Domain) install(ctx context.Context, tmpDir string, id artifact.ID, indexSHA256 string, deadline time.Time) error {
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_EX, deadline, "the artifact lock of "+id.Short())
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if err := lk.Close(); err != nil && committed {
			log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("releasing the artifact lock after publication")
		}
	}()
	target := d.path(dirArtifacts, id.Hex())
	if _, err := os.Lstat(target); err == nil {
		o, verr := d.validateDir(ctx, id, ManifestAndMetadata)
		switch {
		case verr == nil:
			same := o.ready.IndexSHA256 == indexSHA256
			o.close()
			if !same {
				return identityCollision(id)
			}
			log.G(ctx).WithField("id", id.Short()).Info("a competing publication with the same content won")
			removeTree(tmpDir)
			return nil
		case !IsInvalid(verr):
			return storageErr("inspect competing publication", verr)
		}
		if err := d.quarantine(ctx, id, "replaced by a new publication"); err != nil {
			return err
		}
	}
	faultPoint("publish.before-rename")
	if err := os.Rename(tmpDir, target); err != nil {
		return fmt.Errorf("publish %s: %w", id.Short(), ioerr.Classify(err, noSpace))
	}
	faultPoint("publish.after-rename")
	err = harden(target)
	faultPoint("publish.after-harden")
	if err == nil && !syncSkipped("publish.sync-artifacts") {
		err = syncDir(d.path(dirArtifacts))
	}
	if err == nil {
		err = syncDir(d.path(dirTmp))
	}
	if err != nil {
		return d.contain(ctx, id, err)
	}
	faultPoint("publish.after-sync")
	committed = true
	return nil
}

// contain quarantines an entry whose publication failed after its rename.
// If the filesystem refuses the move, the entry keeps its invalidation mode
// and gets a deny marker; if it refuses both, the outcome is uncertain.
func (d *Domain) contain(ctx context.Context, id artifact.ID, cause error) error {
	dst := d.path(dirQuarantine, fmt.Sprintf("%s.%d", id.Hex(), time.Now().UnixNano()))
	qerr := d.moveOut(id, dst)
	if qerr == nil {
		return publicationFailed(id, cause)
	}
	if derr := d.deny(ctx, id, "publication failed: "+cause.Error()); derr != nil {
		// The filesystem refused both the marker and the move: the entry
		// may or may not resolve later.
		return storageErr("contain a failed publication", fmt.Errorf("%w (outcome uncertain)", errors.Join(cause, qerr, derr)))
	}
	return publicationFailed(id, errors.Join(cause, qerr))
}

// harden makes every payload and metadata file read-only (they already are,
// durably, since their fsync), then the directories, and syncs them.
func harden(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		if err := os.Chmod(p, fileHardened); err != nil {
			return err
		}
		faultPoint("publish.mid-harden")
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first, the artifact directory last
		if err := os.Chmod(dirs[i], dirHardened); err != nil {
			return err
		}
	}
	return syncTree(dir)
}

// syncTree fsyncs every directory of a tree, deepest first.
func syncTree(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncDir(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// syncHardened gives a finished file its hardened mode and fsyncs it, so
// that the mode is durable with the bytes: hardening after the rename
// changes no file mode that a power cut could undo.
func syncHardened(f *os.File) error {
	if err := f.Chmod(fileHardened); err != nil {
		return err
	}
	return f.Sync()
}

func writeSynced(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return ioerr.Classify(err, noSpace)
	}
	_, err = f.Write(data)
	if err == nil {
		err = syncHardened(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return ioerr.Classify(err, noSpace)
}

// lockPath is the path of an artifact's lock of the given kind.
func (d *Domain) lockPath(id artifact.ID, kind string) string { return d.ownerLockPath(id.Hex(), kind) }

// ownerLockPath is the path of a lock by its owner's name: an identity hex
// or an anonymous import's name.
func (d *Domain) ownerLockPath(owner, kind string) string {
	return d.path(dirLocks, owner+"."+kind+".lock")
}
