// Package hubsynth writes Hugging Face hub cache repositories, laid out as
// huggingface_hub does, for tests, demos and benchmarks: blobs named by
// their sha256 (LFS files) or git blob sha1 (small files), snapshot entries
// as relative links into blobs/ (one more ../ per folder level), refs/main.
package hubsynth

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Folder is a repository's cache folder: "org/name" is models--org--name.
func Folder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// AddFile adds the size bytes of r as path in the snapshot commit of repo,
// as an LFS blob (named by sha256) or a git file (named by git blob sha1),
// and points refs/main at commit.
func AddFile(cache, repo, commit, path string, r io.Reader, size int64, lfs bool) error {
	root := filepath.Join(cache, Folder(repo))
	blobs := filepath.Join(root, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(blobs, ".add-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	var h hash.Hash = sha256.New()
	if !lfs {
		h = sha1.New()
		h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	}
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("%s: %d bytes, want %d", path, n, size)
	}
	if err != nil {
		return err
	}
	name := hex.EncodeToString(h.Sum(nil))
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, name)); err != nil {
		return err
	}
	link := filepath.Join(root, "snapshots", commit, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return err
	}
	depth := strings.Count("snapshots/"+commit+"/"+filepath.ToSlash(path), "/")
	if err := os.Symlink(strings.Repeat("../", depth)+"blobs/"+name, link); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "refs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "refs", "main"), []byte(commit), 0o644)
}

// AddBytes is AddFile of a byte slice.
func AddBytes(cache, repo, commit, path string, data []byte, lfs bool) error {
	return AddFile(cache, repo, commit, path, bytes.NewReader(data), int64(len(data)), lfs)
}

// AddDir adds every regular file below dir to the snapshot commit of repo:
// *.safetensors, *.bin, *.pth and files of 10 MiB or more as LFS blobs, the
// rest as git files.
func AddDir(cache, repo, commit, dir string) error {
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(dir, p)
		ext := filepath.Ext(p)
		lfs := ext == ".safetensors" || ext == ".bin" || ext == ".pth" || fi.Size() >= 10<<20
		return AddFile(cache, repo, commit, filepath.ToSlash(rel), f, fi.Size(), lfs)
	})
}
