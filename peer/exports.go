package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Bounds of an exported directory.
const (
	exportMaxFiles = 100_000
	exportMaxDepth = 16
)

// Export is an exported directory: one the peer's configuration
// allowlists ([[peer.exports]]) and that the peer serves, as staged:NAME on
// the wire, as a passthrough artifact of the revision it holds.
type Export struct {
	Name       string `toml:"name" json:"name"`
	Path       string `toml:"path" json:"path"`
	Repository string `toml:"repository" json:"repository,omitempty"`
	// Revision is the immutable revision the directory holds; "" takes it
	// from a Hugging Face snapshot path (snapshots/<commit>) in the request.
	Revision  string `toml:"revision" json:"revision,omitempty"`
	Component string `toml:"component" json:"component,omitempty"`
}

var (
	snapshotRE = regexp.MustCompile(`(^|/)snapshots/([0-9a-f]{40})$`)
)

// exportSet holds the exported directories: each hashed once when first
// asked for, then kept open and mapped while the total stays under the
// ceiling; idle ones are dropped, least recently used first, to make room.
// It differs from the store's capacity limits (store/: a build that would
// pass them is refused, nothing is evicted) and from staging's eviction
// (staging/evict.go: the files of least recently used lanes are deleted
// from disk to stay under a watermark): it bounds bytes held mapped in
// memory, and dropping one only unmaps and closes files it never wrote.
type exportSet struct {
	dirs    map[string]Export
	ceiling int64

	mu      sync.Mutex
	entries map[string]*exportEntry // by export id, for good
	mapped  int64
	tick    uint64
}

// exportEntry is one staged id (an exported directory, or one below it):
// its current mapping, made by one session at a time.
type exportEntry struct {
	building sync.Mutex
	cur      *mapping // guarded by exportSet.mu
}

// mapping is an exported directory hashed, opened and mapped.
type mapping struct {
	sv      servable // release unset
	stats   []unix.Stat_t
	bytes   int64
	refs    int    // sessions (and a check in progress) using it
	used    uint64 // set.tick when last used
	dropped bool   // replaced or evicted: unmapped once refs is 0
}

func newExportSet(dirs []Export, ceiling int64) (*exportSet, error) {
	set := &exportSet{dirs: map[string]Export{}, ceiling: ceiling, entries: map[string]*exportEntry{}}
	for _, d := range dirs {
		if !wire.NameRE.MatchString(d.Name) || d.Path == "" {
			return nil, badInput("exported directory %q: want a name and a path", d.Name)
		}
		if d.Revision != "" && !artifact.IsImmutableRevision(d.Revision) {
			return nil, badInput("exported directory %q: revision %q is not immutable", d.Name, d.Revision)
		}
		if _, dup := set.dirs[d.Name]; dup {
			return nil, badInput("exported directory %q listed twice", d.Name)
		}
		set.dirs[d.Name] = d
	}
	return set, nil
}

// list is every exported directory, with the bytes it (and the
// directories below it that were asked for) holds mapped.
func (set *exportSet) list() []wire.ListedExport {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := []wire.ListedExport{}
	for _, d := range set.dirs {
		ls := wire.ListedExport{Name: d.Name, Revision: d.Revision}
		for id, e := range set.entries {
			if name, _, _ := strings.Cut(id, "/"); name == d.Name && e.cur != nil {
				ls.Mapped, ls.Bytes = true, ls.Bytes+e.cur.bytes
			}
		}
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// open returns the exported directory id names, mapping it if it is not,
// or if its files changed since.
func (set *exportSet) open(ctx context.Context, id string) (*servable, error) {
	name, sub, _ := strings.Cut(id, "/")
	dir, ok := set.dirs[name]
	if !ok {
		return nil, fmt.Errorf("%s%s: not an allowlisted directory: %w", wire.ExportPrefix, name, errdefs.ErrNotFound)
	}
	if sub != "" {
		if err := artifact.ValidateRelPath(sub); err != nil {
			return nil, badInput("%s%s: %v", wire.ExportPrefix, id, err)
		}
	}
	set.mu.Lock()
	e := set.entries[id]
	if e == nil {
		e = &exportEntry{}
		set.entries[id] = e
	}
	set.mu.Unlock()
	e.building.Lock()
	defer e.building.Unlock()
	set.mu.Lock()
	st := e.cur
	if st != nil {
		set.pin(st) // not dropped while its files are checked
	}
	set.mu.Unlock()
	if st != nil {
		if st.unchanged(dir, sub) {
			return set.servable(st), nil
		}
		set.unpin(st)
	}
	fresh, err := set.mapDir(ctx, dir, id, sub)
	if err != nil {
		return nil, err
	}
	set.mu.Lock()
	if e.cur != nil {
		set.drop(e)
	}
	e.cur = fresh
	set.pin(fresh)
	set.mu.Unlock()
	return set.servable(fresh), nil
}

// pin counts one more user of st. The caller holds set.mu.
func (set *exportSet) pin(st *mapping) {
	st.refs++
	set.tick++
	st.used = set.tick
}

// unpin counts one user less; the last one of a dropped mapping unmaps it.
func (set *exportSet) unpin(st *mapping) {
	set.mu.Lock()
	defer set.mu.Unlock()
	if st.refs--; st.refs == 0 && st.dropped {
		st.unmap()
	}
}

// servable hands a pinned mapping to a session, which unpins it at release.
func (set *exportSet) servable(st *mapping) *servable {
	sv := st.sv
	var once sync.Once
	sv.release = func() { once.Do(func() { set.unpin(st) }) }
	return &sv
}

// drop forgets an entry's mapping; its mappings go when its last session
// ends. The caller holds set.mu.
func (set *exportSet) drop(e *exportEntry) {
	st := e.cur
	e.cur = nil
	st.dropped = true
	set.mapped -= st.bytes
	if st.refs == 0 {
		st.unmap()
	}
}

func (st *mapping) unmap() {
	unmapShards(st.sv.shards)
	for _, s := range st.sv.shards {
		s.file.Close()
	}
	st.sv.shards = nil
}

func unmapShards(shards []shard) {
	for _, s := range shards {
		if s.data != nil {
			unix.Munmap(s.data)
		}
	}
}

// reserve makes room for n more mapped bytes under the ceiling, dropping
// idle mappings least recently used first.
func (set *exportSet) reserve(n int64) error {
	set.mu.Lock()
	defer set.mu.Unlock()
	for set.mapped+n > set.ceiling {
		var lru *exportEntry
		for _, e := range set.entries {
			if e.cur != nil && e.cur.refs == 0 && (lru == nil || e.cur.used < lru.cur.used) {
				lru = e
			}
		}
		if lru == nil {
			return fmt.Errorf("mapping %d bytes would hold %d mapped, over the ceiling of %d: %w",
				n, set.mapped+n, set.ceiling, errdefs.ErrResourceExhausted)
		}
		set.drop(lru)
	}
	set.mapped += n
	return nil
}

// mapDir opens, hashes and maps every file below dir.Path/sub, refusing any
// path that leaves the exported directory.
func (set *exportSet) mapDir(ctx context.Context, dir Export, ref, sub string) (*mapping, error) {
	revision := dir.Revision
	if revision == "" {
		m := snapshotRE.FindStringSubmatch(sub)
		if m == nil {
			return nil, badInput("%s%s: no revision configured, and not a Hugging Face snapshot path (snapshots/<commit>)", wire.ExportPrefix, ref)
		}
		revision = m[2]
	}
	root, err := unix.Open(dir.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s%s: open allowlisted directory: %w", wire.ExportPrefix, dir.Name, err)
	}
	defer unix.Close(root)
	files, err := walkBeneath(root, sub)
	if err != nil {
		return nil, fmt.Errorf("%s%s: %w", wire.ExportPrefix, ref, err)
	}
	st := &mapping{}
	defer func() {
		if st.sv.shards == nil {
			for _, f := range files {
				f.file.Close()
			}
		}
	}()
	for _, f := range files {
		st.bytes += f.st.Size
	}
	if err := set.reserve(st.bytes); err != nil {
		return nil, fmt.Errorf("%s%s: %w", wire.ExportPrefix, ref, err)
	}
	shards, err := hashAndMap(ctx, files)
	var identity artifact.Identity
	var id artifact.ID
	if err == nil {
		src := &artifact.SourceDir{Root: path.Join(dir.Path, sub)}
		for _, s := range shards {
			src.Files = append(src.Files, artifact.SourceFile{Path: s.entry.Path, Size: s.entry.Size, SHA256: s.entry.SHA256})
		}
		identity = artifact.PassthroughIdentity(src, dir.Repository, revision, dir.Component, 0, 0)
		if err = identity.Validate(); err == nil {
			id, err = identity.ID()
		}
	}
	if err != nil {
		unmapShards(shards)
		set.mu.Lock()
		set.mapped -= st.bytes
		set.mu.Unlock()
		return nil, fmt.Errorf("%s%s: %w", wire.ExportPrefix, ref, err)
	}
	for _, f := range files {
		st.stats = append(st.stats, f.st)
	}
	st.sv = servable{shards: shards, manifest: wire.WeightManifest{Schema: wire.ManifestSchema, Identity: identity,
		ID: id, Export: ref}}
	for _, s := range shards {
		st.sv.manifest.Shards = append(st.sv.manifest.Shards, wire.ShardFromEntry(s.entry, s.data))
	}
	return st, nil
}

// unchanged says whether the exported files still are the ones hashed.
func (st *mapping) unchanged(dir Export, sub string) bool {
	root, err := unix.Open(dir.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	for i, s := range st.sv.shards {
		var now unix.Stat_t
		fd, err := openBeneath(root, path.Join(sub, s.entry.Path), 0)
		if err != nil {
			return false
		}
		err = unix.Fstat(fd, &now)
		unix.Close(fd)
		old := st.stats[i]
		if err != nil || now.Ino != old.Ino || now.Dev != old.Dev || now.Size != old.Size || now.Mtim != old.Mtim || now.Ctim != old.Ctim {
			return false
		}
	}
	return true
}

// exportFile is one file found below an exported directory.
type exportFile struct {
	rel  string // relative to the exported directory
	file *os.File
	st   unix.Stat_t
}

// openBeneath opens p relative to root without leaving it: links are
// followed only while they stay beneath root.
func openBeneath(root int, p string, flags uint64) (int, error) {
	if p == "" {
		p = "."
	}
	fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | flags,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.EXDEV) {
		return -1, badInput("%s leaves the allowlisted directory (a .. or a link out of it)", p)
	}
	return fd, err
}

// walkBeneath lists the non-hidden regular files below root/sub, opened.
func walkBeneath(root int, sub string) ([]exportFile, error) {
	var out []exportFile
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > exportMaxDepth {
			return badInput("%s: deeper than %d directories", rel, exportMaxDepth)
		}
		fd, err := openBeneath(root, path.Join(sub, rel), unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), rel)
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			if strings.HasPrefix(n, ".") {
				continue
			}
			child := path.Join(rel, n)
			fd, err := openBeneath(root, path.Join(sub, child), 0)
			if err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return err
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				unix.Close(fd)
				if err := walk(child, depth+1); err != nil {
					return err
				}
			case unix.S_IFREG:
				if len(out) == exportMaxFiles {
					unix.Close(fd)
					return badInput("more than %d files", exportMaxFiles)
				}
				out = append(out, exportFile{rel: child, file: os.NewFile(uintptr(fd), child), st: st})
			default:
				unix.Close(fd)
			}
		}
		return nil
	}
	err := walk("", 0)
	if err == nil && len(out) == 0 {
		err = badInput("no files")
	}
	if err != nil {
		for _, f := range out {
			f.file.Close()
		}
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, nil
}

// hashAndMap hashes the files in parallel (sha256, BLAKE3, per tensor) and
// maps them read-only.
func hashAndMap(ctx context.Context, files []exportFile) ([]shard, error) {
	shards := make([]shard, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range files {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			e, err := artifact.HashFile(f.file, artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: f.rel, Size: f.st.Size}}})
			if err != nil {
				return fmt.Errorf("hash %s: %w", f.rel, err)
			}
			shards[i] = shard{entry: e, file: f.file}
			if f.st.Size > 0 {
				if shards[i].data, err = unix.Mmap(int(f.file.Fd()), 0, int(f.st.Size), unix.PROT_READ, unix.MAP_SHARED); err != nil {
					return fmt.Errorf("map %s: %w", f.rel, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		unmapShards(shards)
		return nil, err
	}
	return shards, nil
}
