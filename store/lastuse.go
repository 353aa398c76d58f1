package store

import (
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
)

// dirUses holds one empty file per artifact, uses/<id>, whose mtime is the
// artifact's last use: a lease taken (a resolution that hit it, a Prepare,
// a host mount, a peer session) or released. Recording it is one utimensat,
// no fsync: the filesystem writes the time back with its next commit, which
// is durable enough to order artifacts by after a restart; a time lost to a
// crash falls back to the artifact's publication (READY.json's mtime).
const dirUses = "uses"

// touch records a use of id now. It never fails the caller: a lost time
// only makes the artifact look older to eviction.
func (d *Domain) touch(id artifact.ID) {
	d.SetLastUse(id, time.Now())
}

// SetLastUse records t as id's last use in its uses/ record.
// The eviction policy demotes an artifact nothing needs with the epoch.
func (d *Domain) SetLastUse(id artifact.ID, t time.Time) error {
	p := d.path(dirUses, id.Hex())
	err := os.Chtimes(p, t, t)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	os.Mkdir(d.path(dirUses), 0o755) // absent in a domain made before uses/
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	return os.Chtimes(p, t, t)
}

// LastUse is when id was last used: its uses/ record, else its publication.
// The zero time says the artifact is absent.
func (d *Domain) LastUse(id artifact.ID) time.Time {
	if fi, err := os.Stat(d.path(dirUses, id.Hex())); err == nil {
		return fi.ModTime()
	}
	if fi, err := os.Stat(d.path(dirArtifacts, id.Hex(), fileReady)); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

// forgetUse drops id's record once the artifact is gone.
func (d *Domain) forgetUse(id artifact.ID) {
	os.Remove(d.path(dirUses, id.Hex()))
}
