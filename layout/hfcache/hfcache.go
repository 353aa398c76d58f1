// Package hfcache lays an artifact out as one repository folder of a
// Hugging Face hub cache (HF_HUB_CACHE), as huggingface_hub writes it:
//
//	models--ORG--NAME/
//	  refs/main                 the revision, no newline
//	  blobs/<sha256>            each distinct file once (the store's inode)
//	  snapshots/<revision>/PATH a relative symbolic link to ../../blobs/<sha256>,
//	                            one more ../ per subfolder of PATH
//
// so that a server run with HF_HUB_CACHE at the folder's parent and
// HF_HUB_OFFLINE=1 finds ORG/NAME by its repo id. Every blob is named by its
// sha256 (the LFS oid); the hub names a small file kept in git (not LFS) by
// its git blob sha1 instead, which no reader checks (huggingface_hub never
// re-hashes a blob). Only model repositories, and only the main ref.
package hfcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/dirfd"
	"golang.org/x/sys/unix"
)

// Ref is the one ref a tree writes: refs/main holds the revision.
const Ref = "main"

// MaxRepoName bounds each part of a repo id, as the hub does for the name.
const MaxRepoName = 96

// repoPartRE is one part of a repo id as huggingface_hub's validate_repo_id
// (utils/_validators.py) accepts it, in ASCII: word characters, '-' and '.',
// starting and ending with a word character (its \b boundaries).
var repoPartRE = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)

// RepoError is a repo id refused by ValidateRepo: errdefs.ErrInvalidArgument.
type RepoError struct {
	Repo string // cut to a readable length
	Why  string
}

func (e *RepoError) Error() string {
	return fmt.Sprintf("hugging face repo id %q: %s", e.Repo, e.Why)
}

func (e *RepoError) Unwrap() error { return errdefs.ErrInvalidArgument }

// ValidateRepo checks a repo id: NAME or ORG/NAME, each part as the hub
// allows it (at most 96 ASCII letters, digits, '_', '-', '.', starting and
// ending with a letter, digit or '_'), no "--" or ".." anywhere (the cache
// folder joins parts with "--"), not ending in ".git". Anything else is a
// *RepoError.
func ValidateRepo(repo string) error {
	bad := func(why string) error {
		shown := repo
		if len(shown) > 120 {
			shown = shown[:120] + "..."
		}
		return &RepoError{Repo: shown, Why: why}
	}
	parts := strings.Split(repo, "/")
	switch {
	case repo == "":
		return bad("empty")
	case len(parts) > 2:
		return bad("more than one '/' (want NAME or ORG/NAME)")
	case strings.Contains(repo, "--") || strings.Contains(repo, ".."):
		return bad(`"--" and ".." are not allowed`)
	case strings.HasSuffix(repo, ".git"):
		return bad(`it ends in ".git"`)
	}
	for _, p := range parts {
		if len(p) > MaxRepoName {
			return bad(fmt.Sprintf("part of %d characters, more than %d", len(p), MaxRepoName))
		}
		if !repoPartRE.MatchString(p) {
			return bad(fmt.Sprintf("part %q: want ASCII letters, digits, '_', '-' and '.', starting and ending with a letter, digit or '_'", p))
		}
	}
	return nil
}

// Folder is the cache folder of a model repo id (validated):
// models--ORG--NAME, as huggingface_hub's repo_folder_name makes it.
func Folder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// File is one file of the artifact: its relative path and its sha256.
type File struct {
	Path   string
	SHA256 string // 64 lower-case hex
}

// Blob is one blob of the tree and the first file with its content.
type Blob struct {
	Path string // blobs/<sha256>, relative to the repo folder
	File int    // index in the files New was given
}

// Link is one snapshot entry: a relative symbolic link into blobs/.
type Link struct {
	Path   string // snapshots/<revision>/<file path>, relative to the repo folder
	Target string // ../../blobs/<sha256>, one more ../ per subfolder
}

// Tree is an artifact's repository folder, before it is written.
type Tree struct {
	Repo     string
	Folder   string // models--ORG--NAME
	Revision string
	Blobs    []Blob // in order of first use
	Links    []Link // in the files' order
}

// New plans the tree of a repo id at a revision (an immutable one: a
// 40-hex commit or an algo:hex digest, as identities have) holding files
// (validated relative paths, sha256 hex). Bad input is
// errdefs.ErrInvalidArgument.
func New(repo, revision string, files []File) (*Tree, error) {
	if err := ValidateRepo(repo); err != nil {
		return nil, err
	}
	if !artifact.IsImmutableRevision(revision) {
		return nil, fmt.Errorf("hugging face cache of %s: revision %q is not a 40-hex commit or a digest: %w", repo, revision, errdefs.ErrInvalidArgument)
	}
	t := &Tree{Repo: repo, Folder: Folder(repo), Revision: revision, Links: make([]Link, 0, len(files))}
	seen := make(map[string]bool, len(files))
	paths := make(map[string]bool, len(files))
	for i, f := range files {
		if err := artifact.ValidateRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("hugging face cache of %s: %w: %w", repo, err, errdefs.ErrInvalidArgument)
		}
		if paths[f.Path] {
			return nil, fmt.Errorf("hugging face cache of %s: file %q twice: %w", repo, f.Path, errdefs.ErrInvalidArgument)
		}
		paths[f.Path] = true
		if _, err := artifact.ParseSum(f.SHA256); err != nil {
			return nil, fmt.Errorf("hugging face cache of %s: file %q: sha256 %q is not 64 lower-case hex: %w", repo, f.Path, f.SHA256, errdefs.ErrInvalidArgument)
		}
		blob := path.Join("blobs", f.SHA256)
		if !seen[f.SHA256] {
			seen[f.SHA256] = true
			t.Blobs = append(t.Blobs, Blob{Path: blob, File: i})
		}
		up := strings.Repeat("../", 2+strings.Count(f.Path, "/"))
		t.Links = append(t.Links, Link{Path: path.Join("snapshots", revision, f.Path), Target: up + blob})
	}
	return t, nil
}

// LinkBlob puts file (an index in the files New was given) at name in the
// directory open at dirfd, a blob: a hard link to the caller's inode,
// replacing whatever else is there, keeping what is that inode already.
// Write calls it from one goroutine while mk runs on another.
type LinkBlob func(dirfd int, name string, file int) error

// MakeSymlink makes name in the directory open at dirfd a symbolic link
// to target as unix.Symlinkat does (an error satisfying os.ErrExist when
// something is there): a caller may give one that links a shared symlink
// inode of that target instead. Write calls it from one goroutine while
// link runs on another.
type MakeSymlink func(target string, dirfd int, name string) error

// Write writes the tree into dir, the repo folder (created as needed, with
// its parents): blobs through link, the snapshot's links through mk
// (nil: unix.Symlinkat), refs/main. Each directory is made and opened
// once, before its first entry; each entry is made by its name in its
// open directory, so that no call walks the folder's path again. The
// blobs and the links go into different directories, on two goroutines,
// so that neither waits on a directory the other writes; the links'
// goroutine makes the snapshot's folders while the blobs are linked.
// Directories are 0755. It is idempotent:
// an entry that is right already stays, anything else at its path is
// replaced, so it also completes a folder written in part.
func (t *Tree) Write(dir string, link LinkBlob, mk MakeSymlink) error {
	if mk == nil {
		mk = unix.Symlinkat
	}
	fail := func(entry string, err error) error {
		return fmt.Errorf("hugging face cache of %s: %s: %w", t.Repo, entry, err)
	}
	dirs := dirfd.New()
	defer dirs.Close()
	blobs, err := dirs.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		return fail("blobs", err)
	}
	var wg sync.WaitGroup
	var blobErr error
	wg.Go(func() {
		for _, b := range t.Blobs {
			if err := link(blobs, path.Base(b.Path), b.File); err != nil {
				blobErr = fail(b.Path, err)
				return
			}
		}
	})
	linkErr := func() error {
		if _, err := dirs.Open(filepath.Join(dir, "refs")); err != nil {
			return fail("refs", err)
		}
		for _, l := range t.Links {
			at, err := dirs.Open(filepath.Join(dir, filepath.FromSlash(path.Dir(l.Path))))
			if err != nil {
				return fail(l.Path, err)
			}
			if err := symlink(mk, l.Target, at, path.Base(l.Path)); err != nil {
				return fail(l.Path, err)
			}
		}
		return nil
	}()
	wg.Wait()
	if err := errors.Join(blobErr, linkErr); err != nil {
		return err
	}
	ref := filepath.Join(dir, "refs", Ref)
	if have, err := os.ReadFile(ref); err == nil && bytes.Equal(have, []byte(t.Revision)) {
		return nil
	}
	if err := artifact.WriteFileAtomic(ref, []byte(t.Revision), 0o644, artifact.Volatile); err != nil {
		return fmt.Errorf("hugging face cache of %s: %w", t.Repo, err)
	}
	return nil
}

// symlink makes name in the directory open at dirfd a symbolic link to
// target with mk, keeping one that is already.
func symlink(mk MakeSymlink, target string, dirfd int, name string) error {
	// A new folder has nothing at name: the link is all it takes.
	err := mk(target, dirfd, name)
	if !errors.Is(err, os.ErrExist) {
		return err
	}
	if have, err := readlinkat(dirfd, name); err == nil && have == target {
		return nil
	}
	tmp := name + ".weightsnap-link"
	if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := mk(target, dirfd, tmp); err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	return nil
}

// readlinkat is the target of the symbolic link name in the directory
// open at dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
