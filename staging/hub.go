package staging

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
)

// item is one thing a lane stages.
type item struct {
	kind   string // EntryBlob, EntryFile, EntryLink, EntrySparse
	path   string // slash path relative to the lane's src and dst
	size   int64
	mode   fs.FileMode
	repo   string // hub repository, for messages
	name   string // a blob's name (its hash)
	target string // a link's target, as written to dst
	// sparse-rows: the header's length and the row ranges to copy.
	header int64
	ranges []rangeSpec
	// present: when planned, the destination held what the ledger records
	// (or, for a link, the same link).
	present bool
}

// repoFolderRE is a hub cache repository folder.
var repoFolderRE = regexp.MustCompile(`^(models|datasets|spaces)--[^/]+$`)

// repoFolder is the cache folder of a repository as recipes name it:
// "org/name" is a model, "datasets/org/name" a data set.
func repoFolder(repo string) string {
	kind := "models"
	for _, k := range []string{"models/", "datasets/", "spaces/"} {
		if rest, ok := strings.CutPrefix(repo, k); ok {
			kind, repo = strings.TrimSuffix(k, "/"), rest
			break
		}
	}
	return kind + "--" + strings.ReplaceAll(repo, "/", "--")
}

// repoName is the repository of a cache folder: "org/name" for a model.
func repoName(folder string) string {
	kind, rest, _ := strings.Cut(folder, "--")
	name := strings.ReplaceAll(rest, "--", "/")
	if kind == "models" {
		return name
	}
	return kind + "/" + name
}

// hubWalk lists what a hub-mirror lane stages: per repository, the blobs
// its kept snapshot entries link to, its refs and .no_exist markers, its
// snapshot links (each resolved through the hub store) and snapshot files
// that are not links. Pruned paths (skip) and downloads in flight
// (blobs/*.incomplete, and entries whose blob is still one) are left out
// and noted.
func hubWalk(ctx context.Context, b *Block, workers int) (items []item, notes []string, err error) {
	folders, err := hubFolders(b)
	if err != nil {
		return nil, nil, err
	}
	var blobs, files, links []item
	for _, folder := range folders {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		w := repoWalk{b: b, workers: workers, folder: folder, repo: repoName(folder), wanted: map[string]bool{}}
		if err := w.walk(); err != nil {
			return nil, nil, err
		}
		blobs, files, links = append(blobs, w.blobs...), append(files, w.files...), append(links, w.links...)
		notes = append(notes, w.notes...)
	}
	// Blobs first, so links never dangle on the destination for long.
	return append(append(blobs, files...), links...), notes, nil
}

// hubFolders lists the repository folders a lane mirrors.
func hubFolders(b *Block) ([]string, error) {
	if len(b.Repos) > 0 {
		var out []string
		for _, r := range b.Repos {
			f := repoFolder(r)
			fi, err := os.Stat(filepath.Join(b.Src, f))
			if err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("lane %s: repository %s is not in the hub cache %s (no %s): %w", b.ID, r, b.Src, f, errdefs.ErrNotFound)
			}
			out = append(out, f)
		}
		return out, nil
	}
	des, err := os.ReadDir(b.Src)
	if err != nil {
		return nil, fmt.Errorf("lane %s: %w", b.ID, err)
	}
	var out []string
	for _, de := range des {
		if de.IsDir() && repoFolderRE.MatchString(de.Name()) {
			out = append(out, de.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lane %s: no models--*, datasets--* or spaces--* folders in %s: %w", b.ID, b.Src, errdefs.ErrNotFound)
	}
	return out, nil
}

// repoWalk walks one repository folder.
type repoWalk struct {
	b                   *Block
	workers             int // stat'ing blobs at once
	folder, repo        string
	blobDir             map[string]fs.DirEntry
	wanted              map[string]bool
	blobs, files, links []item
	notes               []string
}

// HubError is a hub cache that cannot be mirrored as it is: a snapshot
// link that leaves its repository's blobs, or names a blob that is missing.
type HubError struct {
	Lane, Repo, Path, Detail string
}

func (e *HubError) Error() string {
	return "lane " + e.Lane + ": repo " + e.Repo + ": " + e.Path + ": " + e.Detail
}

// Unwrap classifies the error.
func (e *HubError) Unwrap() error { return errdefs.ErrDataLoss }

func (w *repoWalk) walk() error {
	root := filepath.Join(w.b.Src, w.folder)
	des, err := os.ReadDir(filepath.Join(root, "blobs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lane %s: repo %s: %w", w.b.ID, w.repo, err)
	}
	w.blobDir = make(map[string]fs.DirEntry, len(des))
	for _, de := range des {
		w.blobDir[de.Name()] = de
	}
	if err := w.tree("snapshots", 1, w.snapshotEntry); err != nil {
		return err
	}
	if err := w.tree("refs", -1, w.plainFile); err != nil {
		return err
	}
	if err := w.tree(".no_exist", 1, w.plainFile); err != nil {
		return err
	}
	names := make([]string, 0, len(w.wanted))
	for n := range w.wanted {
		names = append(names, n)
	}
	sort.Strings(names)
	w.blobs = make([]item, len(names))
	errs := make([]error, len(names))
	parallelFor(len(names), w.workers, func(i int) {
		n := names[i]
		fi, err := w.blobDir[n].Info()
		if err != nil {
			errs[i] = fmt.Errorf("lane %s: repo %s: blob %s: %w", w.b.ID, w.repo, n, err)
			return
		}
		w.blobs[i] = item{kind: EntryBlob, path: w.folder + "/blobs/" + n, size: fi.Size(), mode: fi.Mode(), repo: w.repo, name: n}
	})
	for _, err := range errs { // the first, as a walk in order stops at it
		if err != nil {
			return err
		}
	}
	for n := range w.blobDir {
		if strings.HasSuffix(n, ".incomplete") {
			w.notes = append(w.notes, fmt.Sprintf("repo %s: blobs/%s: download in flight, skipped", w.repo, n))
		}
	}
	return nil
}

// tree walks dir below the repository, calling fn for every non-directory
// with its path relative to the repository; skip patterns apply below the
// first keep path components after dir (the commit folder).
func (w *repoWalk) tree(dir string, keep int, fn func(p, rel string, de fs.DirEntry, keep int) error) error {
	root := filepath.Join(w.b.Src, w.folder)
	top := filepath.Join(root, dir)
	err := filepath.WalkDir(top, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && p == top {
				return filepath.SkipDir
			}
			return err
		}
		// WalkDir's paths are top joined with names: below root, clean.
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if de.IsDir() {
			if rel != dir && w.skipped(rel, keep) {
				w.notes = append(w.notes, fmt.Sprintf("repo %s: %s/: skipped", w.repo, rel))
				return filepath.SkipDir
			}
			return nil
		}
		if w.skipped(rel, keep) {
			return nil
		}
		return fn(p, rel, de, keep)
	})
	if err != nil {
		var he *HubError
		if errors.As(err, &he) {
			return err
		}
		return fmt.Errorf("lane %s: repo %s: %w", w.b.ID, w.repo, err)
	}
	return nil
}

// skipped applies the lane's skip patterns to a path below snapshots/<commit>/
// (or .no_exist/<commit>/): a pattern without '/' matches any one path
// component (a file or a folder name), one with '/' the path from the
// commit folder down, or any folder above it. keep < 0: nothing is skipped.
func (w *repoWalk) skipped(rel string, keep int) bool {
	if len(w.b.Skip) == 0 {
		return false
	}
	parts := strings.Split(rel, "/")
	if keep < 0 || len(parts) <= 1+keep {
		return false
	}
	parts = parts[1+keep:]
	for _, p := range w.b.Skip {
		p = strings.TrimSuffix(p, "/")
		for i := range parts {
			var subject string
			if strings.Contains(p, "/") {
				subject = strings.Join(parts[:i+1], "/")
			} else {
				subject = parts[i]
			}
			if ok, _ := path.Match(p, subject); ok {
				return true
			}
		}
	}
	return false
}

// snapshotEntry resolves a snapshot entry: a link through the hub store to
// its blob (kept as a relative link), or a file copied as it is.
func (w *repoWalk) snapshotEntry(p, rel string, de fs.DirEntry, keep int) error {
	if de.Type()&fs.ModeSymlink == 0 {
		return w.plainFile(p, rel, de, keep)
	}
	fail := func(format string, args ...any) error {
		return &HubError{Lane: w.b.ID, Repo: w.repo, Path: rel, Detail: fmt.Sprintf(format, args...)}
	}
	if strings.Count(rel, "/") < 2 {
		return fail("a snapshot must be a folder named by its commit")
	}
	target, err := os.Readlink(p)
	if err != nil {
		return fmt.Errorf("lane %s: repo %s: %w", w.b.ID, w.repo, err)
	}
	name, ok := linkBlob(rel, target, filepath.Join(w.b.Src, w.folder))
	if !ok {
		return fail("link %q does not resolve into the repository's blobs/", target)
	}
	de, ok = w.blobDir[name]
	if !ok {
		if _, inFlight := w.blobDir[name+".incomplete"]; inFlight {
			w.notes = append(w.notes, fmt.Sprintf("repo %s: %s: blob %s still downloading, skipped", w.repo, rel, name))
			return nil
		}
		return fail("link %q names blob %s, which is missing", target, name)
	}
	if !de.Type().IsRegular() {
		return fail("blob %s is not a regular file", name)
	}
	w.wanted[name] = true
	depth := strings.Count(rel, "/")
	w.links = append(w.links, item{kind: EntryLink, path: w.folder + "/" + rel, repo: w.repo, name: name,
		target: strings.Repeat("../", depth) + "blobs/" + name})
	return nil
}

// linkBlob resolves a snapshot entry's link through the hub store: rel is
// the entry's path in the repository folder repoDir, target its link
// string. ok is false unless the link names a file directly in the
// repository's blobs/ (and not a download in flight).
func linkBlob(rel, target, repoDir string) (name string, ok bool) {
	var resolved string
	if filepath.IsAbs(target) {
		r, err := filepath.Rel(repoDir, filepath.Clean(target))
		if err != nil {
			return "", false
		}
		resolved = filepath.ToSlash(r)
	} else {
		resolved = path.Join(path.Dir(rel), filepath.ToSlash(target))
	}
	name, ok = strings.CutPrefix(resolved, "blobs/")
	if !ok || name == "" || name == "." || name == ".." || strings.Contains(name, "/") || strings.HasSuffix(name, ".incomplete") {
		return "", false
	}
	return name, true
}

// plainFile lists a regular file copied as it is (a ref, a .no_exist
// marker, a snapshot file that is not a link).
func (w *repoWalk) plainFile(_, rel string, de fs.DirEntry, _ int) error {
	if !de.Type().IsRegular() {
		w.notes = append(w.notes, fmt.Sprintf("repo %s: %s: not a regular file or link, skipped", w.repo, rel))
		return nil
	}
	fi, err := de.Info()
	if err != nil {
		return fmt.Errorf("lane %s: repo %s: %w", w.b.ID, w.repo, err)
	}
	w.files = append(w.files, item{kind: EntryFile, path: w.folder + "/" + rel, size: fi.Size(), mode: fi.Mode(), repo: w.repo})
	return nil
}
