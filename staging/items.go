package staging

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/internal/ioerr"
)

// verifyRank orders verify modes by strength.
var verifyRank = map[Verify]int{VerifySize: 0, VerifySample: 1, VerifyFull: 2}

// ensureFile stages a blob, a plain file or a sparse-rows file: nothing
// when the ledger and a content check say it is complete; else what is
// already on the destination once verified there; else a hardlink to
// identical content staged before; else a verified copy.
func (r *laneRun) ensureFile(ctx context.Context, it item, src, dst string) (Entry, outcome, error) {
	if prev, ok := r.lp.ledger.Entry(it.path); ok && r.e.opts.Mode != ModeForce {
		same, err := r.unchanged(ctx, it, prev, src)
		if err != nil {
			return Entry{}, 0, err
		}
		if same {
			return prev, outUnchanged, nil
		}
	}
	if err := r.mkdirFor(dst); err != nil {
		return Entry{}, 0, ioerr.Classify(err, nil)
	}
	if it.kind == EntrySparse {
		e, err := r.stageSparse(ctx, it, src, dst)
		return e, outCopied, err
	}
	in, err := os.Open(src)
	if err != nil {
		return Entry{}, 0, err
	}
	defer in.Close()
	if err := sameSize(in, it); err != nil {
		return Entry{}, 0, err
	}
	s := &srcSample{f: in, size: it.size}
	if e, ok, err := r.adopt(ctx, it, in, dst, s); err != nil || ok {
		return e, outAdopted, err
	}
	if e, ok, err := r.dedup(ctx, it, in, dst, s); err != nil || ok {
		return e, outLinked, err
	}
	e, err := r.copyFile(ctx, it, in, dst, s)
	return e, outCopied, err
}

// srcSample is a source's sampled hash, read once when first needed.
type srcSample struct {
	f    *os.File
	size int64
	sum  string
}

func (s *srcSample) get() (string, error) {
	if s.sum == "" {
		sum, err := sampleHash(s.f, 0, s.size)
		if err != nil {
			return "", err
		}
		s.sum = sum
	}
	return s.sum, nil
}

// unchanged reports whether prev still describes the staged file and its
// source: in skip mode by the ledger alone; otherwise the staged file's
// stat must have matched prev when planned, and the source's size and
// sampled content must match what was recorded (a blob in size mode: its
// size). Source mtimes are never used.
func (r *laneRun) unchanged(ctx context.Context, it item, prev Entry, src string) (bool, error) {
	if r.e.opts.Mode == ModeSkip {
		return true, nil
	}
	if !it.present || verifyRank[prev.Verify] < verifyRank[r.b.Verify] {
		return false, nil
	}
	switch {
	case it.kind == EntryBlob && r.b.Verify == VerifySize:
		return true, nil
	case it.kind == EntrySparse:
		if !sameRanges(it.ranges, prev.Ranges) {
			return false, nil
		}
		f, err := os.Open(src)
		if err != nil {
			return false, err
		}
		defer f.Close()
		s, err := sparseSample(ctx, f, it)
		return s == prev.Sample, err
	}
	s, err := sampleFile(src, it.size)
	return s == prev.Sample, err
}

func sameRanges(a []rangeSpec, b []RangeRecord) bool {
	return slices.EqualFunc(a, b, func(x rangeSpec, y RangeRecord) bool {
		return x.table == y.Table && x.rows == y.Rows && x.off == y.Offset && x.n == y.Length
	})
}

// fullHash is the hash full mode checks a file with: a blob's name, or a
// whole-file BLAKE3 compared with the source.
func (r *laneRun) fullHash(it item) (hash.Hash, string, error) {
	if it.kind != EntryBlob {
		return blake3.New(), "blake3", nil
	}
	h, algo, ok := blobHash(it.name, it.size)
	if !ok {
		return nil, "", fmt.Errorf("lane %s: repo %s: blob %s is named neither by a sha256 nor by a git blob sha1, so full mode cannot verify it (use verify = \"sample-hash\"): %w",
			r.b.ID, it.repo, it.name, errdefs.ErrInvalidArgument)
	}
	return h, algo, nil
}

// blobMismatch is the error of a blob whose bytes are not its name.
func (r *laneRun) blobMismatch(it item, path, algo, got string) error {
	return mismatch(r.b.ID, it.repo, path, "blob "+it.name, algo+":"+it.name, algo+":"+got)
}

// adopt verifies a file already at dst that no ledger entry vouches for
// (a crash before its journal entry, a force run, a cache staged by other
// means) and takes it as staged. A blob is checked against its name (and
// in force mode its source too); in sample-hash mode the staged file's
// samples must equal the source's.
func (r *laneRun) adopt(ctx context.Context, it item, in *os.File, dst string, s *srcSample) (Entry, bool, error) {
	fi, err := os.Lstat(dst)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != it.size {
		return Entry{}, false, nil
	}
	cur, err := os.Open(dst)
	if err != nil {
		return Entry{}, false, nil
	}
	defer cur.Close()
	e := Entry{Path: it.path, Kind: it.kind, Size: it.size, Verify: r.b.Verify}
	switch {
	case r.b.Verify == VerifyFull:
		h, algo, err := r.fullHash(it)
		if err != nil {
			return Entry{}, false, err
		}
		if it.kind != EntryBlob {
			same, err := sameBytes(ctx, in, cur, 0, it.size, h)
			if err != nil || !same {
				return Entry{}, false, err
			}
			e.Digest = algo + ":" + hex.EncodeToString(h.Sum(nil))
			break
		}
		if err := hashRange(ctx, cur, 0, it.size, h); err != nil {
			return Entry{}, false, err
		}
		if hex.EncodeToString(h.Sum(nil)) != it.name {
			return Entry{}, false, nil // a bad staged copy: copy it again
		}
		if r.e.opts.Mode == ModeForce {
			hs, _, _ := r.fullHash(it)
			if err := hashRange(ctx, in, 0, it.size, hs); err != nil {
				return Entry{}, false, err
			}
			if got := hex.EncodeToString(hs.Sum(nil)); got != it.name {
				return Entry{}, false, r.blobMismatch(it, in.Name(), algo, got)
			}
		}
		e.Digest = algo + ":" + it.name
	case r.b.Verify == VerifySample || it.kind != EntryBlob:
		want, err := s.get()
		if err != nil {
			return Entry{}, false, err
		}
		got, err := sampleHash(cur, 0, it.size)
		if err != nil || got != want {
			return Entry{}, false, err
		}
	}
	if e.Sample, err = sampleHash(cur, 0, it.size); err != nil {
		return Entry{}, false, err
	}
	e, err = withStat(e, dst)
	return e, err == nil, err
}

// dedup hardlinks a blob to a staged blob with the same content, on the
// same filesystem, in any lane: candidates have the same size and sampled hash,
// and are then compared with the source byte for byte (in full mode the
// source is hashed against the blob's name in the same pass).
func (r *laneRun) dedup(ctx context.Context, it item, in *os.File, dst string, s *srcSample) (Entry, bool, error) {
	if it.size == 0 || it.kind != EntryBlob {
		return Entry{}, false, nil
	}
	cands, err := r.index.lookup(it.size, r.lp.dev)
	if err != nil {
		return Entry{}, false, err
	}
	if len(cands) == 0 {
		return Entry{}, false, nil
	}
	want, err := s.get()
	if err != nil {
		return Entry{}, false, err
	}
	for _, c := range cands {
		if c.e.Sample != want || c.path == dst || !dstMatches(c.path, c.e) {
			continue
		}
		e, ok, err := r.linkTo(ctx, it, in, dst, c)
		if err != nil || ok {
			return e, ok, err
		}
	}
	return Entry{}, false, nil
}

func (r *laneRun) linkTo(ctx context.Context, it item, in *os.File, dst string, c indexed) (Entry, bool, error) {
	cf, err := os.Open(c.path)
	if err != nil {
		return Entry{}, false, nil
	}
	defer cf.Close()
	e := Entry{Path: it.path, Kind: it.kind, Size: it.size, Verify: r.b.Verify, Sample: c.e.Sample}
	var h hash.Hash
	var algo string
	if r.b.Verify == VerifyFull {
		if h, algo, err = r.fullHash(it); err != nil {
			return Entry{}, false, err
		}
	}
	var w io.Writer
	if h != nil {
		w = h
	}
	same, err := sameBytes(ctx, in, cf, 0, it.size, w)
	if err != nil || !same {
		return Entry{}, false, err
	}
	if h != nil {
		got := hex.EncodeToString(h.Sum(nil))
		if it.kind == EntryBlob && got != it.name {
			return Entry{}, false, r.blobMismatch(it, in.Name(), algo, got)
		}
		e.Digest = algo + ":" + got
	}
	tmp := dst + tmpSuffix
	os.Remove(tmp)
	if err := os.Link(c.path, tmp); err != nil {
		return Entry{}, false, nil // another filesystem after all, or a link limit: copy instead
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return Entry{}, false, err
	}
	e, err = withStat(e, dst)
	return e, err == nil, err
}

// copyFile copies a source to dst through a temp file, verifies the copy
// and renames it into place. A blob in full mode is hashed against its name
// as it is copied; a file in full mode gets its BLAKE3 recorded; in
// sample-hash mode the copy's samples must equal the source's.
func (r *laneRun) copyFile(ctx context.Context, it item, in *os.File, dst string, s *srcSample) (Entry, error) {
	var h hash.Hash
	var algo string
	var err error
	if r.b.Verify == VerifyFull {
		if h, algo, err = r.fullHash(it); err != nil {
			return Entry{}, err
		}
	}
	var want string
	if r.b.Verify == VerifySample || (it.kind != EntryBlob && r.b.Verify == VerifySize) {
		if want, err = s.get(); err != nil {
			return Entry{}, err
		}
	}
	tmp := dst + tmpSuffix
	out, err := createTemp(tmp, it.size, it.mode, false)
	if err != nil {
		return Entry{}, ioerr.Classify(err, nil)
	}
	fail := func(err error) (Entry, error) {
		out.Close()
		os.Remove(tmp)
		return Entry{}, ioerr.Classify(err, nil)
	}
	var w io.Writer
	if h != nil {
		w = h
	}
	if err := copyRange(ctx, in, out, 0, it.size, w, r.progress); err != nil {
		return fail(err)
	}
	e := Entry{Path: it.path, Kind: it.kind, Size: it.size, Verify: r.b.Verify}
	if h != nil {
		got := hex.EncodeToString(h.Sum(nil))
		if it.kind == EntryBlob && got != it.name {
			return fail(r.blobMismatch(it, in.Name(), algo, got))
		}
		e.Digest = algo + ":" + got
	}
	if e.Sample, err = sampleHash(out, 0, it.size); err != nil {
		return fail(err)
	}
	if want != "" && e.Sample != want {
		return fail(mismatch(r.b.ID, it.repo, in.Name(), "sampled ranges of the copy", want, e.Sample))
	}
	if err := sameSize(in, it); err != nil {
		return fail(err)
	}
	return r.install(e, out, tmp, dst, in)
}

// ensureLink writes a snapshot link unless the plan found the same one there.
func (r *laneRun) ensureLink(it item, dst string) (Entry, outcome, error) {
	e := Entry{Path: it.path, Kind: EntryLink, Target: it.target}
	if it.present {
		return e, outUnchanged, nil
	}
	if err := r.mkdirFor(dst); err != nil {
		return Entry{}, 0, ioerr.Classify(err, nil)
	}
	tmp := dst + tmpSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Entry{}, 0, err
	}
	if err := os.Symlink(it.target, tmp); err != nil {
		return Entry{}, 0, ioerr.Classify(err, nil)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return Entry{}, 0, err
	}
	return e, outCreated, nil
}
