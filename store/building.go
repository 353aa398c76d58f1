package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// BuildEndedError says a build that a reader followed ended without publishing.
// It failed, was cancelled, or its process died.
// Its ranges not yet verified never will be.
type BuildEndedError struct {
	ID artifact.ID
}

func (e *BuildEndedError) Error() string {
	return fmt.Sprintf("the build of %s ended without publishing", e.ID.Short())
}

// Unwrap classifies the error: another source may have the artifact.
func (e *BuildEndedError) Unwrap() error { return errdefs.ErrUnavailable }

// Building is a read-only view of an in-progress build of one artifact, by
// this process or another: its announced document, its payload files, and
// which of their ranges the builder verified. It reads payload only through
// Wait: a range not recorded verified is never handed out.
type Building struct {
	d   *Domain
	id  artifact.ID
	dir *os.File // the temp build directory, followed through publication
	doc []byte

	mu       sync.Mutex
	prog     *os.File
	read     int64 // how far prog is parsed
	verified map[string][]span
	pieces   map[pieceRange][][32]byte // recorded pieces' chaining values
	files    map[string]*os.File
	total    int64 // bytes verified, over every file
	depth    int   // the last source recorded, -1 before any
	ended    bool  // the builder recorded its end without publishing
	done     bool  // published: every range counts verified
}

// span is a verified range [off, end) of one file.
type span struct{ off, end int64 }

// pieceRange is a range of one file whose pieces are recorded.
type pieceRange struct {
	path   string
	off, n int64
}

// Building opens the announced in-progress build of id: errdefs.ErrNotFound
// when no build of id is running or it has not announced yet.
func (d *Domain) Building(ctx context.Context, id artifact.ID) (*Building, error) {
	if !d.buildRunning(id) {
		return nil, fmt.Errorf("no build of %s running: %w", id.Short(), errdefs.ErrNotFound)
	}
	matches, _ := filepath.Glob(d.path(dirTmp, id.Hex()+".*"))
	for _, m := range matches {
		b, err := d.openBuilding(id, m)
		if err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no announced build of %s: %w", id.Short(), errdefs.ErrNotFound)
}

// Builds are the ids whose builds run and announced their progress.
func (d *Domain) Builds(ctx context.Context) []artifact.ID {
	matches, _ := filepath.Glob(d.path(dirTmp, "*", fileProgress))
	var out []artifact.ID
	for _, m := range matches {
		owner, _, _ := strings.Cut(filepath.Base(filepath.Dir(m)), ".")
		id, err := artifact.ParseIDHex(owner)
		if err == nil && !slices.Contains(out, id) && d.buildRunning(id) {
			out = append(out, id)
		}
	}
	return out
}

// buildRunning says whether a process holds id's build lock. The probe is a
// shared flock held for an instant: a builder waiting for the lock polls.
func (d *Domain) buildRunning(id artifact.ID) bool {
	lk, free, err := tryLock(d.lockPath(id, "build"), unix.LOCK_SH)
	if err != nil {
		return false
	}
	if free {
		lk.Close()
	}
	return !free
}

func (d *Domain) openBuilding(id artifact.ID, dir string) (*Building, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	df := os.NewFile(uintptr(dfd), dir)
	pfd, err := unix.Openat(dfd, fileProgress, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		df.Close()
		return nil, err
	}
	b := &Building{d: d, id: id, dir: df, prog: os.NewFile(uintptr(pfd), fileProgress), verified: map[string][]span{}, pieces: map[pieceRange][][32]byte{}, files: map[string]*os.File{}, depth: -1}
	b.mu.Lock()
	err = b.refresh()
	b.mu.Unlock()
	if err == nil && (b.doc == nil || b.ended) {
		err = fmt.Errorf("build of %s not announced yet, or ended: %w", id.Short(), errdefs.ErrNotFound)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// ID is the artifact being built.
func (b *Building) ID() artifact.ID { return b.id }

// Document is what the builder announced.
func (b *Building) Document() []byte { return b.doc }

// VerifiedBytes is how many payload bytes the builder verified so far.
func (b *Building) VerifiedBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	return b.total
}

// Depth is how many building nodes stand between the build and a complete source.
// It is artifact.Seeder.Source's depth.
// It is -1 while the build records none, having no source yet.
func (b *Building) Depth() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	return b.depth
}

// refresh parses the records appended since the last look. The caller holds mu.
func (b *Building) refresh() error {
	for {
		var hdr [recHeader]byte
		if _, err := b.prog.ReadAt(hdr[:], b.read); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // a record not written yet, or in part
			}
			return err
		}
		size := binary.LittleEndian.Uint32(hdr[1:])
		if size > maxRecord {
			return fmt.Errorf("progress of %s: a record of %d bytes at %d: %w", b.id.Short(), size, b.read, errdefs.ErrDataLoss)
		}
		body := make([]byte, size)
		if _, err := b.prog.ReadAt(body, b.read+recHeader); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch {
		case hdr[0] == recAnnounce && b.doc == nil:
			b.doc = body
		case hdr[0] == recVerified && len(body) > 16 && b.doc != nil:
			off, n, err := b.recordRange(body)
			if err != nil {
				return err
			}
			b.add(string(body[16:]), span{off, off + n})
		case hdr[0] == recPieces && len(body) > 20 && b.doc != nil:
			if err := b.addPieces(body); err != nil {
				return err
			}
		case hdr[0] == recSource && len(body) == 4 && b.doc != nil:
			// Untrusted: compared as unsigned before it is converted.
			d := binary.LittleEndian.Uint32(body)
			if d > artifact.MaxDepth {
				return fmt.Errorf("progress of %s: depth %d out of bounds: %w", b.id.Short(), d, errdefs.ErrDataLoss)
			}
			b.depth = int(d)
		case hdr[0] == recEnd && len(body) == 0:
			b.ended = true
		default:
			return fmt.Errorf("progress of %s: bad record %q at %d: %w", b.id.Short(), hdr[0], b.read, errdefs.ErrDataLoss)
		}
		b.read += recHeader + int64(len(body))
	}
}

// recordRange is the range [off, off+n) a record's body starts with, both
// compared as unsigned before they are converted, the end included.
func (b *Building) recordRange(body []byte) (off, n int64, err error) {
	o, l := binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:])
	if o > math.MaxInt64 || l > math.MaxInt64-o {
		return 0, 0, fmt.Errorf("progress of %s: range %d+%d out of bounds: %w", b.id.Short(), o, l, errdefs.ErrDataLoss)
	}
	return int64(o), int64(l), nil
}

// addPieces parses a pieces record: its count, compared as unsigned with
// maxPieces and with the body's length before anything is allocated.
func (b *Building) addPieces(body []byte) error {
	off, n, err := b.recordRange(body)
	if err != nil {
		return err
	}
	count := uint64(binary.LittleEndian.Uint32(body[16:]))
	if count == 0 || count > maxPieces || 20+32*count >= uint64(len(body)) {
		return fmt.Errorf("progress of %s: %d pieces in a record of %d bytes: %w", b.id.Short(), count, len(body), errdefs.ErrDataLoss)
	}
	cvs := make([][32]byte, count)
	for i := range cvs {
		copy(cvs[i][:], body[20+32*i:])
	}
	b.pieces[pieceRange{string(body[20+32*count:]), off, n}] = cvs
	return nil
}

// add merges a verified range into its file's sorted, disjoint spans.
func (b *Building) add(path string, s span) {
	var out []span
	added := s.end - s.off
	for _, o := range b.verified[path] {
		if o.end < s.off || o.off > s.end {
			out = append(out, o)
			continue
		}
		added -= min(o.end, s.end) - max(o.off, s.off) // the overlap was counted before
		s = span{min(o.off, s.off), max(o.end, s.end)}
	}
	out = append(out, s)
	slices.SortFunc(out, func(x, y span) int { return int(x.off - y.off) })
	b.verified[path] = out
	b.total += added
}

// covered says whether [off, off+n) of path is verified. The caller holds mu.
func (b *Building) covered(path string, off, n int64) bool {
	if b.done || n == 0 {
		return true
	}
	for _, s := range b.verified[path] {
		if s.off <= off && off+n <= s.end {
			return true
		}
	}
	return false
}

// Checks of Wait: a check reads what the builder recorded on each write
// to the progress file, where it can be watched, else polling from
// waitFirst, doubling up to waitMax while nothing new is verified; whether
// the build was published or its builder died, at most every waitLive.
const (
	waitFirst = time.Millisecond
	waitMax   = 20 * time.Millisecond
	waitLive  = 250 * time.Millisecond
)

// Wait waits for [off, off+n) of the payload file at path to be verified.
// It returns nil once the range is verified or the build is published.
// It returns a *BuildEndedError when the build ended without publishing.
// It returns ctx's error when ctx ends first.
func (b *Building) Wait(ctx context.Context, path string, off, n int64) error {
	return b.wait(ctx, path, func() bool { return b.covered(path, off, n) })
}

// WaitPieces waits for the chaining values of the pieces of [off, off+n) of a payload file.
// It returns them once the builder recorded them (artifact.Seeder.Pieces).
// It returns none once the range is verified without them.
// It fails as Wait does.
func (b *Building) WaitPieces(ctx context.Context, path string, off, n int64) ([][32]byte, error) {
	var cvs [][32]byte
	err := b.wait(ctx, path, func() bool {
		cvs = b.pieces[pieceRange{path, off, n}]
		return cvs != nil || b.covered(path, off, n)
	})
	if err != nil {
		return nil, err
	}
	return cvs, nil
}

// wait returns once ready, called with mu held after each refresh, says
// so, or once the build is published. Between checks it sleeps on a watch
// of the progress file, or polls where no watch can be made.
func (b *Building) wait(ctx context.Context, path string, ready func() bool) error {
	var w *progressWatch // nil: polls
	watched := false     // a watch was tried
	defer func() { w.close() }()
	// The last check of the build's publication and its builder: a wait
	// makes its first one waitLive after it starts.
	lived := time.Now()
	for delay := waitFirst; ; {
		live := time.Since(lived) >= waitLive
		if live {
			lived = time.Now()
		}
		if done, err := b.check(ready, live); done || err != nil {
			return err
		}
		if !watched {
			// A record appended before the watch began is read by the
			// check that follows it, not waited for.
			watched = true
			if w = watchProgress(b.prog); w != nil {
				continue
			}
		}
		if w != nil {
			delay = time.Until(lived.Add(waitLive))
		}
		if err := w.wait(ctx, delay); err != nil {
			return fmt.Errorf("waiting for %s of %s: %w", path, b.id.Short(), err)
		}
		if w == nil {
			delay = min(2*delay, waitMax)
		}
	}
}

// check refreshes the build's progress and says whether the wait is over:
// ready says so, or, with live, the build is published (done, no error) or
// ended without publishing (a *BuildEndedError).
func (b *Building) check(ready func() bool, live bool) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refresh(); err != nil {
		return true, err
	}
	if ready() {
		return true, nil
	}
	if !live && !b.ended {
		return false, nil
	}
	if b.published() {
		b.done = true
		return true, nil
	}
	if b.ended {
		return true, &BuildEndedError{ID: b.id}
	}
	if !b.d.buildRunning(b.id) {
		// Publication comes before the build lock's release: a build
		// that holds the lock no longer and is not published never will be.
		if b.published() {
			b.done = true
			return true, nil
		}
		return true, &BuildEndedError{ID: b.id}
	}
	return false, nil
}

// published says whether the followed directory is artifacts/<id> now.
func (b *Building) published() bool {
	var mine, pub unix.Stat_t
	if unix.Fstat(int(b.dir.Fd()), &mine) != nil || unix.Lstat(b.d.path(dirArtifacts, b.id.Hex()), &pub) != nil {
		return false
	}
	return mine.Dev == pub.Dev && mine.Ino == pub.Ino
}

// File opens the payload file at path read-only beneath the build's
// directory, following no link. Read only ranges Wait returned for.
func (b *Building) File(path string) (*os.File, error) {
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return nil, fmt.Errorf("payload path %q: not a plain relative path or reserved: %w", path, errdefs.ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if f, ok := b.files[path]; ok {
		return f, nil
	}
	fd, err := unix.Openat2(int(b.dir.Fd()), path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(int(b.dir.Fd()), path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open building %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	b.files[path] = f
	return f, nil
}

// Close releases the descriptors.
func (b *Building) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.files {
		f.Close()
	}
	b.files = map[string]*os.File{}
	b.prog.Close()
	return b.dir.Close()
}
