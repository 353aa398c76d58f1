package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
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
	entries := make([]artifact.FileEntry, 0, len(b.files))
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
	if len(entries) == 0 {
		return fmt.Errorf("producer %s wrote no files: %w", producer, errdefs.ErrFailedPrecondition)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	digest, err := b.identity.Digest()
	if err != nil {
		return err
	}
	idx := &artifact.Index{Schema: artifact.IndexSchema, Identity: digest, Files: entries}
	m := Manifest{Schema: ManifestSchema, Identity: b.identity, IdentityDigest: digest, TotalBytes: idx.TotalBytes()}
	for _, e := range entries {
		m.Files = append(m.Files, ManifestFile{Path: e.Path, Size: e.Size, SHA256: e.SHA256, BLAKE3: e.BLAKE3})
	}
	idxRaw, err := idx.Encode()
	if err != nil {
		return err
	}
	manRaw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ready := Ready{Schema: ReadySchema, IdentityDigest: digest, ManifestSHA256: sha256Hex(manRaw),
		IndexSHA256: sha256Hex(idxRaw), Producer: producer, Created: time.Now().UTC().Format(time.RFC3339Nano)}
	readyRaw, _ := json.Marshal(ready)
	for _, f := range []struct {
		name string
		data []byte
	}{{fileManifest, manRaw}, {fileIndex, idxRaw}, {fileReady, readyRaw}} {
		if err := writeSynced(filepath.Join(b.dir, f.name), f.data); err != nil {
			return err
		}
	}
	if err := syncTree(b.dir); err != nil {
		return err
	}
	return b.d.install(ctx, b.dir, b.id, deadline)
}

// install moves a sealed temp build to artifacts/<id> under the exclusive
// artifact lock, then hardens it and syncs both parents.
func (d *Domain) install(ctx context.Context, tmpDir, id string, deadline time.Time) error {
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_EX, deadline, "the artifact lock of "+short(id))
	if err != nil {
		return err
	}
	defer lk.Close()
	target := d.path(dirArtifacts, id)
	if _, err := os.Lstat(target); err == nil {
		if _, verr := d.validateDir(id, ManifestAndMetadata); verr == nil {
			log.G(ctx).WithField("id", short(id)).Info("a competing publication is already valid; keeping it")
			removeTree(tmpDir)
			return nil
		}
		if err := d.quarantine(ctx, id, "replaced by a new publication"); err != nil {
			return err
		}
	}
	if err := os.Rename(tmpDir, target); err != nil {
		return fmt.Errorf("publish %s: %w", short(id), classifyIO(err))
	}
	if err := harden(target); err != nil {
		return fmt.Errorf("harden %s: %w", short(id), err)
	}
	if err := syncDir(d.path(dirArtifacts)); err != nil {
		return err
	}
	return syncDir(d.path(dirTmp))
}

// harden makes every payload and metadata file read-only, then the directories.
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
		return os.Chmod(p, fileHardened)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first, the artifact directory last
		if err := os.Chmod(dirs[i], dirHardened); err != nil {
			return err
		}
	}
	return syncDir(dir)
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

func writeSynced(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return classifyIO(err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return classifyIO(err)
}

func (d *Domain) lockPath(id, kind string) string {
	return d.path(dirLocks, id+"."+kind+".lock")
}
