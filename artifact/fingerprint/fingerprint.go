// Package fingerprint computes the source fingerprint of a canonical
// source directory (the artifact.SourceFile list that enters an identity)
// and keeps a cache of it, so that fingerprinting an unchanged canonical
// source reads no source byte.
//
// The cache holds one record per source file in a folder of its own (the
// store keeps it at <root>/fingerprints/). A record is keyed by the file's
// path, device and inode, size, mtime and ctime in nanoseconds and, for a
// link, the link's target; it carries the file's sha256 and a checksum of
// itself. A record whose key differs from the file is stale and is
// replaced; a record that does not decode or whose checksum fails is
// corrupt and is rebuilt; any I/O failure of the cache falls back to
// hashing the source file directly. The cache never changes a result: a
// scan with it and a scan without it return the same fingerprint.
//
// A record written when the file had changed within RacyWindow of the
// hash is "racy" (a later write in the same timestamp tick could go
// unseen) and is not trusted: the file is hashed again, as git does with
// racily clean index entries.
package fingerprint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
)

// Schema is the version of the record encoding.
const Schema = 1

// DirName is the cache's folder name under a store root.
const DirName = "fingerprints"

// RacyWindow is how close to the start of its hash a file's last change may
// be before the record is not trusted. It covers coarse filesystem clocks
// (one jiffy at HZ=100 is 10 ms).
const RacyWindow = 20 * time.Millisecond

// maxRecordBytes caps a record read, so a corrupt record cannot exhaust memory.
const maxRecordBytes = 8 << 10

// Key is what a record is valid for: a file's path and its stat.
type Key struct {
	Path string `json:"path"` // absolute path as scanned
	artifact.Stamp
	Link string `json:"link,omitempty"` // target of Path when Path is a symbolic link
}

// record is one cache file.
type record struct {
	Schema   int    `json:"schema"`
	Key      Key    `json:"key"`
	SHA256   string `json:"sha256"`
	HashedNs int64  `json:"hashed_ns"` // wall clock when the hash began
	Checksum string `json:"checksum"`  // sha256 of this record encoded with an empty checksum
}

// Stats counts what a scan did.
type Stats struct {
	Files       int   `json:"files"`
	Hits        int   `json:"hits"`         // records used: no byte of the file read
	Misses      int   `json:"misses"`       // no record, a stale or a racy one: file hashed
	Rebuilt     int   `json:"rebuilt"`      // corrupt records replaced
	Errors      int   `json:"errors"`       // cache I/O failures (the file was hashed instead)
	Named       int   `json:"named"`        // hub-cache blob links, named by their sha256
	HashedBytes int64 `json:"hashed_bytes"` // source bytes read
}

// Result is a fingerprinted source directory.
type Result struct {
	Src   *artifact.SourceDir
	Keys  map[string]Key // by relative path, as stat'ed when fingerprinted
	Stats Stats

	misses []*entry // files Lookup found no valid record for
}

// Cache is a fingerprint cache in one folder. The zero value and a nil
// *Cache hash every file.
type Cache struct {
	dir string
}

// New returns a cache kept in dir (created on first write). An empty dir
// disables the cache.
func New(dir string) *Cache { return &Cache{dir: dir} }

// Dir is the cache's folder.
func (c *Cache) Dir() string {
	if c == nil {
		return ""
	}
	return c.dir
}

var errChanging = errors.New("changed while it was hashed")

// entry is one file being fingerprinted.
type entry struct {
	rel, abs string
	key      Key
	file     *artifact.SourceFile
	rec      string // record path; "" without a cache
}

// Scan fingerprints the checkpoint at root exactly as artifact.ScanSource
// does (non-hidden regular files, links followed, hub-cache blob links named
// by their sha256), using and refreshing the cache.
func (c *Cache) Scan(ctx context.Context, root string) (*Result, error) {
	res, err := c.Lookup(ctx, root)
	if err != nil {
		return nil, err
	}
	if err := hashAll(ctx, res.misses, c.writer(ctx, &res.Stats), &res.Stats); err != nil {
		return nil, err
	}
	res.misses = nil
	return res, nil
}

// Record stores the sha256 of each file Lookup missed, as learned by a
// single-pass copy (entries by path) that began at startedNs, for the files
// whose stat has not changed since the Lookup; it fills them into res.Src.
func (c *Cache) Record(ctx context.Context, res *Result, entries []artifact.FileEntry, startedNs int64) {
	sums := make(map[string]string, len(entries))
	for _, e := range entries {
		sums[e.Path] = e.SHA256
	}
	w := c.writer(ctx, &res.Stats)
	for _, e := range res.misses {
		sum, ok := sums[e.rel]
		if now, _, err := stat(e.abs); !ok || err != nil || now != e.key {
			continue
		}
		e.file.SHA256 = sum
		w.write(e, sum, startedNs)
	}
	res.misses = nil
}

// Lookup fingerprints the checkpoint at root from the cache alone: files
// without a valid record keep an empty SHA256 (res.Src.Complete() says
// whether any did), for a caller that hashes them some other way.
func (c *Cache) Lookup(ctx context.Context, root string) (*Result, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	src, err := artifact.ListSource(root) // the files of a checkpoint, hub blob links named
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	res := &Result{Src: src, Keys: map[string]Key{}}
	w := c.writer(ctx, &res.Stats)
	for i := range src.Files {
		f := &src.Files[i]
		e := &entry{rel: f.Path, abs: filepath.Join(absRoot, filepath.FromSlash(f.Path)), file: f}
		if e.key, _, err = stat(e.abs); err != nil {
			return nil, fmt.Errorf("fingerprint %s: %w", root, err)
		}
		res.Keys[e.rel] = e.key
		res.Stats.Files++
		if f.SHA256 != "" {
			res.Stats.Named++
			continue
		}
		if w.on {
			e.rec = filepath.Join(c.dir, recordName(e.abs))
			if sum, ok := c.lookup(ctx, e, &res.Stats); ok {
				f.SHA256 = sum
				res.Stats.Hits++
				continue
			}
		}
		res.misses = append(res.misses, e)
	}
	return res, nil
}

// lookup returns the sha256 from a valid, current, non-racy record.
func (c *Cache) lookup(ctx context.Context, e *entry, st *Stats) (string, bool) {
	raw, err := artifact.ReadFileAtMost(e.rec, maxRecordBytes)
	if errors.Is(err, fs.ErrNotExist) {
		st.Misses++
		return "", false
	}
	if errors.Is(err, artifact.ErrFileTooLarge) {
		st.Rebuilt++
		log.G(ctx).WithError(err).WithField("file", e.rel).Warn("fingerprint record corrupt; rebuilding it")
		return "", false
	}
	if err != nil {
		st.Errors++
		log.G(ctx).WithError(err).WithField("file", e.rel).Warn("fingerprint cache unreadable; hashing the source")
		return "", false
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		st.Rebuilt++
		log.G(ctx).WithError(err).WithField("file", e.rel).Warn("fingerprint record corrupt; rebuilding it")
		return "", false
	}
	if rec.Key != e.key || racy(rec.Key, rec.HashedNs) {
		st.Misses++
		return "", false
	}
	return rec.SHA256, true
}

func racy(k Key, hashedNs int64) bool {
	return max(k.MtimeNs, k.CtimeNs) >= hashedNs-int64(RacyWindow)
}

// recordWriter writes records, once the cache folder exists.
type recordWriter struct {
	ctx context.Context
	c   *Cache
	on  bool
	mu  sync.Mutex
	st  *Stats
}

func (c *Cache) writer(ctx context.Context, st *Stats) *recordWriter {
	w := &recordWriter{ctx: ctx, c: c, st: st}
	if c == nil || c.dir == "" {
		return w
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		st.Errors++
		log.G(ctx).WithError(err).Warn("fingerprint cache unavailable; hashing every source file")
		return w
	}
	w.on = true
	return w
}

func (w *recordWriter) write(e *entry, sum string, hashedNs int64) {
	if !w.on || e.rec == "" {
		return
	}
	rec := record{Schema: Schema, Key: e.key, SHA256: sum, HashedNs: hashedNs}
	raw := encodeRecord(rec)
	// Not synced: a record lost or torn by a crash is a miss or a corrupt
	// record, both of which are rebuilt.
	if err := artifact.WriteFileAtomic(e.rec, raw, 0o644, artifact.Volatile); err != nil {
		w.mu.Lock()
		w.st.Errors++
		w.mu.Unlock()
		log.G(w.ctx).WithError(err).WithField("file", e.rel).Warn("fingerprint record not written")
	}
}

// hashAll hashes the files in todo with up to GOMAXPROCS readers.
func hashAll(ctx context.Context, todo []*entry, w *recordWriter, st *Stats) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan *entry)
	)
	for range min(runtime.GOMAXPROCS(0), max(len(todo), 1)) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for e := range next {
				hashedNs := time.Now().UnixNano()
				sum, n, err := hashFile(ctx, e, buf)
				mu.Lock()
				st.HashedBytes += n
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				e.file.SHA256 = sum
				w.write(e, sum, hashedNs)
			}
		})
	}
	for _, e := range todo {
		if ctx.Err() != nil {
			break
		}
		next <- e
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// hashFile returns the sha256 of a file read once (artifact.HashSource)
// and checks that it is still the file Lookup stamped.
func hashFile(ctx context.Context, e *entry, buf []byte) (string, int64, error) {
	sum, st, err := artifact.HashSource(ctx, e.abs, e.rel, buf)
	var sm *artifact.SourceMismatchError
	if errors.As(err, &sm) || (err == nil && st != e.key.Stamp) {
		return "", st.Size, fmt.Errorf("fingerprint %s: %w: %w", e.abs, errChanging, errdefs.ErrUnavailable)
	}
	if err != nil {
		return "", 0, err
	}
	return sum, st.Size, nil
}

// Changed lists the files of a fingerprint whose stat no longer matches: a
// file that changed after it was fingerprinted.
func (r *Result) Changed() []string {
	var out []string
	for _, f := range r.Src.Files {
		k := r.Keys[f.Path]
		now, _, err := stat(k.Path)
		if err != nil || now != k {
			out = append(out, f.Path)
		}
	}
	return out
}

// stat returns the key of the file at p (following links) and whether it is
// a regular file.
func stat(p string) (Key, bool, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return Key{}, false, err
	}
	st, err := artifact.StampOf(fi)
	if err != nil {
		return Key{}, false, err
	}
	k := Key{Path: p, Stamp: st}
	if lfi, err := os.Lstat(p); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
		if target, err := os.Readlink(p); err == nil {
			k.Link = target
		}
	}
	return k, fi.Mode().IsRegular(), nil
}

// recordName is the record file of an absolute path.
func recordName(abs string) string {
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:]) + ".json"
}

func encodeRecord(rec record) []byte {
	rec.Checksum = ""
	body, _ := json.Marshal(rec)
	sum := sha256.Sum256(body)
	rec.Checksum = "sha256:" + hex.EncodeToString(sum[:])
	raw, _ := json.Marshal(rec)
	return raw
}

func decodeRecord(raw []byte) (record, error) {
	var rec record
	if len(raw) > maxRecordBytes {
		return rec, fmt.Errorf("record larger than %d bytes", maxRecordBytes)
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return rec, err
	}
	if rec.Schema != Schema {
		return rec, fmt.Errorf("record schema %d, want %d", rec.Schema, Schema)
	}
	if !artifact.IsSHA256Hex(rec.SHA256) {
		return rec, fmt.Errorf("record sha256 %q is not 64 hex digits", rec.SHA256)
	}
	want := rec.Checksum
	if string(encodeRecord(rec)) != string(raw) || want == "" {
		return rec, fmt.Errorf("record checksum mismatch")
	}
	return rec, nil
}
