package producers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// CompileCacheName is the compile-cache producer's name.
const CompileCacheName = "compile-cache"

const (
	compileCacheVersion = "1"
	compileCacheImpl    = "weightsnap compile-cache v1: every regular file below an engine's cache directory copied verbatim, " +
		"hidden ones included, .weightsnap/ left out; links and special files refused"
)

// CompileCacheRef is the compile-cache producer's identity fields.
func CompileCacheRef() artifact.ProducerRef {
	return RefOf(CompileCacheName, compileCacheVersion, compileCacheImpl)
}

// pointerDir is the directory a weightsnap view adds to what it shows
// (pointer.Dir's first element): a cache mounted from an artifact and
// published again leaves it out.
const pointerDir = ".weightsnap"

// CompileCache is the POST_LOAD_ONLY producer of a compile cache: the
// directory an engine wrote at its first start (TorchInductor, Triton,
// ...), its files stored as they are, whatever they hold. It runs only
// through post-load publication (resolve.Runtime.PublishAfterLoad): the
// cache exists once a load compiled it. Its identity is
// artifact.CompileCacheIdentity, made from the keys, not from the files,
// so a later start finds it before it has a cache. NewCompileCache makes
// one.
type CompileCache struct {
	dir   string
	files []artifact.SourceFile
	total int64
	done  atomic.Int64
}

// NewCompileCache lists the cache directory dir: its regular files,
// hidden ones too, without a view's .weightsnap/. A symbolic link, a
// special file or an empty directory tree is refused.
func NewCompileCache(dir string) (*CompileCache, error) {
	p := &CompileCache{dir: dir}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		switch {
		case path == dir:
			return nil
		case e.IsDir() && rel == pointerDir:
			return filepath.SkipDir
		case e.IsDir():
			return nil
		case !e.Type().IsRegular():
			return fmt.Errorf("compile cache %s: %s is a %s, not a regular file (a cache artifact holds files only): %w",
				dir, rel, e.Type(), errdefs.ErrInvalidArgument)
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		p.files = append(p.files, artifact.SourceFile{Path: rel, Size: fi.Size()})
		p.total += fi.Size()
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("compile cache %s: %w: %w", dir, err, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("compile cache %s: %w", dir, err)
	}
	if len(p.files) == 0 {
		return nil, fmt.Errorf("compile cache %s holds no files: %w", dir, errdefs.ErrInvalidArgument)
	}
	sort.Slice(p.files, func(i, j int) bool { return p.files[i].Path < p.files[j].Path })
	return p, nil
}

// Files are the cache's files, sorted by path (sizes only).
func (p *CompileCache) Files() []artifact.SourceFile { return p.files }

// Name implements artifact.Producer.
func (p *CompileCache) Name() string { return CompileCacheName }

// Phase implements PhasedProducer.
func (p *CompileCache) Phase() Phase { return PostLoadOnly }

// Produce implements artifact.Producer: each file copied as it is; one
// that changes size while it is copied fails the build.
func (p *CompileCache) Produce(ctx context.Context, w artifact.Writer) error {
	if err := w.Reserve(p.total); err != nil {
		return err
	}
	for _, f := range p.files {
		if err := artifact.CopyVerbatim(ctx, w, p.dir, f, func(n int64) { p.done.Add(n) }); err != nil {
			return err
		}
	}
	return nil
}

// Progress implements artifact.ProgressReporter.
func (p *CompileCache) Progress() (done, total int64) { return p.done.Load(), p.total }

var (
	_ PhasedProducer            = (*CompileCache)(nil)
	_ artifact.ProgressReporter = (*CompileCache)(nil)
)
