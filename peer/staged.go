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
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// stagedPrefix marks a model request for an allowlisted directory:
// staged:NAME, or staged:NAME/SUBDIR for a directory below it (such as a
// Hugging Face cache's models--org--name/snapshots/<commit>).
const stagedPrefix = "staged:"

// Bounds of a staged directory.
const (
	stagedMaxFiles = 100_000
	stagedMaxDepth = 16
)

// StagedDir is an allowlisted directory the peer serves as a passthrough
// artifact of the revision it holds.
type StagedDir struct {
	Name       string `toml:"name" json:"name"`
	Path       string `toml:"path" json:"path"`
	Repository string `toml:"repository" json:"repository,omitempty"`
	// Revision is the immutable revision the directory holds; "" takes it
	// from a Hugging Face snapshot path (snapshots/<commit>) in the request.
	Revision  string `toml:"revision" json:"revision,omitempty"`
	Component string `toml:"component" json:"component,omitempty"`
}

var (
	stagedNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	snapshotRE   = regexp.MustCompile(`(^|/)snapshots/([0-9a-f]{40})$`)
)

// stagedSet holds the staged directories: each hashed once when first
// asked for, then kept open and mapped while the total stays under the
// ceiling; idle ones are dropped, least recently used first, to make room.
type stagedSet struct {
	dirs    map[string]StagedDir
	ceiling int64

	mu      sync.Mutex
	entries map[string]*stagedEntry // by staged id
	mapped  int64
	tick    uint64
}

// stagedEntry is one staged directory.
type stagedEntry struct {
	id       string
	sv       servable // release unset; shards mapped
	stats    []unix.Stat_t
	bytes    int64
	refs     int
	used     uint64
	dropped  bool // replaced or evicted: unmapped when the last session ends
	building sync.Mutex
}

func newStagedSet(dirs []StagedDir, ceiling int64) (*stagedSet, error) {
	set := &stagedSet{dirs: map[string]StagedDir{}, ceiling: ceiling, entries: map[string]*stagedEntry{}}
	for _, d := range dirs {
		if !stagedNameRE.MatchString(d.Name) || d.Path == "" {
			return nil, badInput("staged directory %q: want a name and a path", d.Name)
		}
		if d.Revision != "" && !artifact.IsImmutableRevision(d.Revision) {
			return nil, badInput("staged directory %q: revision %q is not immutable", d.Name, d.Revision)
		}
		if _, dup := set.dirs[d.Name]; dup {
			return nil, badInput("staged directory %q listed twice", d.Name)
		}
		set.dirs[d.Name] = d
	}
	return set, nil
}

func (set *stagedSet) list() []ListedStaged {
	set.mu.Lock()
	defer set.mu.Unlock()
	out := []ListedStaged{}
	for _, d := range set.dirs {
		ls := ListedStaged{Name: d.Name, Revision: d.Revision}
		if e := set.entries[d.Name]; e != nil && !e.dropped {
			ls.Staged, ls.Bytes = true, e.bytes
		}
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// open returns the staged directory id names, staging it if needed.
func (set *stagedSet) open(ctx context.Context, id string) (*servable, error) {
	name, sub, _ := strings.Cut(id, "/")
	dir, ok := set.dirs[name]
	if !ok {
		return nil, fmt.Errorf("%s%s: not an allowlisted directory: %w", stagedPrefix, name, errdefs.ErrNotFound)
	}
	if sub != "" {
		if err := artifact.ValidateRelPath(sub); err != nil {
			return nil, badInput("%s%s: %v", stagedPrefix, id, err)
		}
	}
	set.mu.Lock()
	e := set.entries[id]
	if e == nil {
		e = &stagedEntry{id: id}
		set.entries[id] = e
	}
	set.mu.Unlock()
	e.building.Lock()
	defer e.building.Unlock()
	if e.sv.shards != nil && !e.dropped && e.unchanged(dir, sub) {
		return set.acquire(e), nil
	}
	fresh, err := set.stage(ctx, dir, id, sub)
	if err != nil {
		return nil, err
	}
	set.mu.Lock()
	set.drop(e)
	set.entries[id] = fresh
	set.mu.Unlock()
	return set.acquire(fresh), nil
}

func (set *stagedSet) acquire(e *stagedEntry) *servable {
	set.mu.Lock()
	defer set.mu.Unlock()
	e.refs++
	set.tick++
	e.used = set.tick
	sv := e.sv
	var once sync.Once
	sv.release = func() {
		once.Do(func() {
			set.mu.Lock()
			defer set.mu.Unlock()
			if e.refs--; e.refs == 0 && e.dropped {
				e.unmap()
			}
		})
	}
	return &sv
}

// drop forgets an entry; its mappings go when its last session ends. The
// caller holds set.mu.
func (set *stagedSet) drop(e *stagedEntry) {
	if e.dropped || e.sv.shards == nil {
		return
	}
	e.dropped = true
	set.mapped -= e.bytes
	if set.entries[e.id] == e {
		delete(set.entries, e.id)
	}
	if e.refs == 0 {
		e.unmap()
	}
}

func (e *stagedEntry) unmap() {
	unmapShards(e.sv.shards)
	for _, s := range e.sv.shards {
		s.file.Close()
	}
	e.sv.shards = nil
}

func unmapShards(shards []shard) {
	for _, s := range shards {
		if s.data != nil {
			unix.Munmap(s.data)
		}
	}
}

// reserve makes room for n more mapped bytes under the ceiling, dropping
// idle entries least recently used first.
func (set *stagedSet) reserve(n int64) error {
	set.mu.Lock()
	defer set.mu.Unlock()
	for set.mapped+n > set.ceiling {
		var lru *stagedEntry
		for _, e := range set.entries {
			if e.refs == 0 && e.sv.shards != nil && (lru == nil || e.used < lru.used) {
				lru = e
			}
		}
		if lru == nil {
			return fmt.Errorf("staging %d bytes would hold %d mapped, over the ceiling of %d: %w",
				n, set.mapped+n, set.ceiling, errdefs.ErrResourceExhausted)
		}
		set.drop(lru)
	}
	set.mapped += n
	return nil
}

// stage opens, hashes and maps every file below dir.Path/sub, refusing any
// path that leaves the allowlisted directory.
func (set *stagedSet) stage(ctx context.Context, dir StagedDir, id, sub string) (*stagedEntry, error) {
	revision := dir.Revision
	if revision == "" {
		m := snapshotRE.FindStringSubmatch(sub)
		if m == nil {
			return nil, badInput("%s%s: no revision configured, and not a Hugging Face snapshot path (snapshots/<commit>)", stagedPrefix, id)
		}
		revision = m[2]
	}
	root, err := unix.Open(dir.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s%s: open allowlisted directory: %w", stagedPrefix, dir.Name, err)
	}
	defer unix.Close(root)
	files, err := walkBeneath(root, sub)
	if err != nil {
		return nil, fmt.Errorf("%s%s: %w", stagedPrefix, id, err)
	}
	e := &stagedEntry{id: id}
	defer func() {
		if e.sv.shards == nil {
			for _, f := range files {
				f.file.Close()
			}
		}
	}()
	for _, f := range files {
		e.bytes += f.st.Size
	}
	if err := set.reserve(e.bytes); err != nil {
		return nil, fmt.Errorf("%s%s: %w", stagedPrefix, id, err)
	}
	shards, err := hashAndMap(ctx, files)
	var identity artifact.Identity
	var digest string
	if err == nil {
		src := &artifact.SourceDir{Root: path.Join(dir.Path, sub)}
		for _, s := range shards {
			src.Files = append(src.Files, artifact.SourceFile{Path: s.entry.Path, Size: s.entry.Size, SHA256: s.entry.SHA256})
		}
		identity = artifact.PassthroughIdentity(src, dir.Repository, revision, dir.Component, 0, 0)
		if err = identity.Validate(); err == nil {
			digest, err = identity.Digest()
		}
	}
	if err != nil {
		unmapShards(shards)
		set.mu.Lock()
		set.mapped -= e.bytes
		set.mu.Unlock()
		return nil, fmt.Errorf("%s%s: %w", stagedPrefix, id, err)
	}
	for _, f := range files {
		e.stats = append(e.stats, f.st)
	}
	e.sv = servable{shards: shards, manifest: WeightManifest{Schema: ManifestSchema, Identity: identity,
		IdentityDigest: digest, Staged: id}}
	for _, s := range shards {
		e.sv.manifest.Shards = append(e.sv.manifest.Shards, shardFromEntry(s.entry))
	}
	return e, nil
}

// unchanged says whether the staged files still are the ones hashed.
func (e *stagedEntry) unchanged(dir StagedDir, sub string) bool {
	root, err := unix.Open(dir.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	for i, s := range e.sv.shards {
		var st unix.Stat_t
		fd, err := openBeneath(root, path.Join(sub, s.entry.Path), 0)
		if err != nil {
			return false
		}
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		old := e.stats[i]
		if err != nil || st.Ino != old.Ino || st.Dev != old.Dev || st.Size != old.Size || st.Mtim != old.Mtim || st.Ctim != old.Ctim {
			return false
		}
	}
	return true
}

// stagedFile is one file found below a staged directory.
type stagedFile struct {
	rel  string // relative to the staged directory
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
func walkBeneath(root int, sub string) ([]stagedFile, error) {
	var out []stagedFile
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > stagedMaxDepth {
			return badInput("%s: deeper than %d directories", rel, stagedMaxDepth)
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
				if len(out) == stagedMaxFiles {
					unix.Close(fd)
					return badInput("more than %d files", stagedMaxFiles)
				}
				out = append(out, stagedFile{rel: child, file: os.NewFile(uintptr(fd), child), st: st})
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
func hashAndMap(ctx context.Context, files []stagedFile) ([]shard, error) {
	shards := make([]shard, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range files {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			e, err := artifact.HashFile(f.file, artifact.Binding{Want: artifact.FileEntry{Path: f.rel, Size: f.st.Size}})
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
