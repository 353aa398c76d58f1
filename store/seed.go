package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// fileProgress is the append-only record of a seeding build's progress, in
// its temp directory: the announced document, then every range verified.
// Other processes read it (Building); it is removed before the build is
// sealed, so it never reaches artifacts/ and never changes what READY means.
const fileProgress = ".progress"

// Records of the progress file: [kind u8][body length u32 LE][body].
// An announce's body is the document; a verified range's is
// [off u64 LE][n u64 LE][path]; a range's pieces' is [off u64 LE]
// [n u64 LE][count u32 LE][count × 32 chaining values][path]; a source's
// is [depth u32 LE]; an end's (the build stopped without publishing) is
// empty.
const (
	recAnnounce = 'A'
	recVerified = 'V'
	recPieces   = 'P'
	recSource   = 'S'
	recEnd      = 'E'
	recHeader   = 5
)

// maxRecord bounds a progress record's body; the largest is the
// announcement, a peer manifest's size at most (64 MiB).
const maxRecord = 64 << 20

// maxPieces bounds a pieces record: a range of 1 TiB in pieces of 1 MiB.
const maxPieces = 1 << 20

// Seeding implements artifact.Seeder, a part of artifact.Writer.
func (b *build) Seeding() bool { return b.d.served() }

// Serving marks the domain served to other nodes by a weight peer until release.
// Builds then announce their progress (artifact.Seeder.Seeding).
// It is a shared flock on locks/serve.lock, so it ends with the process.
func (d *Domain) Serving(ctx context.Context) (release func(), err error) {
	lk, err := lockFile(ctx, d.path(dirLocks, lockServe), unix.LOCK_SH, time.Now().Add(d.policy.CoordinationTimeout()), "the serve lock")
	if err != nil {
		return nil, err
	}
	return func() { lk.Close() }, nil
}

// served says whether a process serves the domain: the serve lock cannot be
// taken exclusively (for an instant; Serving waits its turn).
func (d *Domain) served() bool {
	lk, free, err := tryLock(d.path(dirLocks, lockServe), unix.LOCK_EX)
	if err != nil {
		return false
	}
	if free {
		lk.Close()
	}
	return !free
}

// Announce implements artifact.Seeder: it starts the progress file with
// the document.
func (b *build) Announce(doc []byte) error {
	b.progMu.Lock()
	defer b.progMu.Unlock()
	if b.progress != nil {
		return fmt.Errorf("build %s announced twice: %w", b.id.Short(), errdefs.ErrAlreadyExists)
	}
	f, err := os.OpenFile(filepath.Join(b.dir, fileProgress), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("announce %s: %w", b.id.Short(), ioerr.Classify(err, noSpace))
	}
	if err := appendRecord(f, recAnnounce, doc); err != nil {
		f.Close()
		return err
	}
	b.progress = f
	return nil
}

// announced says whether the build announced its progress.
func (b *build) announced() bool {
	b.progMu.Lock()
	defer b.progMu.Unlock()
	return b.progress != nil
}

// Verified implements artifact.Seeder: it appends the range to the
// progress file. The range must lie in a payload file this build created.
func (b *build) Verified(path string, off, n int64) error {
	if err := b.checkRange("verified", path, off, n); err != nil {
		return err
	}
	return b.record(recVerified, verifiedBody(path, off, n))
}

// Pieces implements artifact.Seeder: it appends the range's pieces to the
// progress file.
func (b *build) Pieces(path string, off, n int64, cvs [][32]byte) error {
	if err := b.checkRange("pieces of", path, off, n); err != nil {
		return err
	}
	if len(cvs) == 0 || len(cvs) > maxPieces {
		return fmt.Errorf("build %s: %d pieces of %q: %w", b.id.Short(), len(cvs), path, errdefs.ErrInvalidArgument)
	}
	body := binary.LittleEndian.AppendUint64(nil, uint64(off))
	body = binary.LittleEndian.AppendUint64(body, uint64(n))
	body = binary.LittleEndian.AppendUint32(body, uint32(len(cvs)))
	for _, cv := range cvs {
		body = append(body, cv[:]...)
	}
	return b.record(recPieces, append(body, path...))
}

// checkRange refuses a range that is not in a payload file this build created.
func (b *build) checkRange(what, path string, off, n int64) error {
	b.mu.Lock()
	w, ok := b.files[path]
	b.mu.Unlock()
	if !ok || off < 0 || n < 0 || off > w.size || n > w.size-off {
		return fmt.Errorf("build %s: %s range %d+%d of %q is not in a payload file: %w", b.id.Short(), what, off, n, path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// verifiedBody is a verified range's record body.
func verifiedBody(path string, off, n int64) []byte {
	body := binary.LittleEndian.AppendUint64(nil, uint64(off))
	body = binary.LittleEndian.AppendUint64(body, uint64(n))
	return append(body, path...)
}

// Source implements artifact.Seeder: it records the build's depth.
func (b *build) Source(depth int) error {
	if depth < 0 || depth > artifact.MaxDepth {
		return fmt.Errorf("build %s: depth %d out of [0, %d]: %w", b.id.Short(), depth, artifact.MaxDepth, errdefs.ErrInvalidArgument)
	}
	return b.record(recSource, binary.LittleEndian.AppendUint32(nil, uint32(depth)))
}

// record appends a record after the announce.
func (b *build) record(kind byte, body []byte) error {
	b.progMu.Lock()
	defer b.progMu.Unlock()
	if b.progress == nil {
		return fmt.Errorf("build %s: progress recorded before the announce: %w", b.id.Short(), errdefs.ErrFailedPrecondition)
	}
	return appendRecord(b.progress, kind, body)
}

// endProgress tells the followers of a build in dir that it ended without
// publishing: its process stopped it (release), or died and a new build of
// the same identity adopts its files (adoptStale). Best effort: a follower
// of a build whose process died also sees its build lock free.
func endProgress(dir string) {
	f, err := os.OpenFile(filepath.Join(dir, fileProgress), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	appendRecord(f, recEnd, nil)
}

// appendRecord appends one record in a single write, so a reader sees it
// whole or not yet.
func appendRecord(f *os.File, kind byte, body []byte) error {
	if len(body) > maxRecord {
		return fmt.Errorf("record progress: %d bytes, at most %d: %w", len(body), maxRecord, errdefs.ErrInvalidArgument)
	}
	rec := make([]byte, 0, recHeader+len(body))
	rec = append(rec, kind)
	rec = binary.LittleEndian.AppendUint32(rec, uint32(len(body)))
	if _, err := f.Write(append(rec, body...)); err != nil {
		return fmt.Errorf("record progress: %w", ioerr.Classify(err, noSpace))
	}
	return nil
}

// dropProgress closes and removes the progress file before the build is
// sealed; readers keep the descriptor they opened.
func (b *build) dropProgress() error {
	b.progMu.Lock()
	defer b.progMu.Unlock()
	if b.progress == nil {
		return nil
	}
	b.progress.Close()
	b.progress = nil
	if err := os.Remove(filepath.Join(b.dir, fileProgress)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
