package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
)

// resumeDir is where a build keeps the payload files of an interrupted build
// of the same identity, until the producer reuses them or publication drops them.
const resumeDir = ".resume"

// adoptStale moves the newest stale temp build of the same id (the caller
// holds its build lock) into the new build's resume area and removes the
// others, so a producer can reuse what the interrupted build wrote.
func (b *build) adoptStale() {
	matches, _ := filepath.Glob(b.d.path(dirTmp, b.id.Hex()+".*"))
	var stale []string
	for _, m := range matches {
		if m != b.dir {
			stale = append(stale, m)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return modTime(stale[i]) > modTime(stale[j]) })
	for i, s := range stale {
		endProgress(s)
		if i == 0 && os.Rename(s, filepath.Join(b.dir, resumeDir)) == nil {
			continue
		}
		removeTree(s)
	}
}

func modTime(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}

// Reuse implements artifact.Writer: it adopts a payload file kept from an
// interrupted build if it holds exactly the record's size and sha256, hashed
// once under the binding (BindNone: sha256 and tensor tree; BindSHA256:
// sha256 and header; BindTree: the tensor tree). It reports whether it did,
// with the file's hashes.
func (b *build) Reuse(bind artifact.Binding) (artifact.FileEntry, bool, error) {
	path, size := bind.Want.Path, bind.Want.Size
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return artifact.FileEntry{}, false, fmt.Errorf("payload path %q: not a plain relative path or reserved", path)
	}
	old := filepath.Join(b.dir, resumeDir, path)
	f, err := os.Open(old)
	if errors.Is(err, os.ErrNotExist) {
		return artifact.FileEntry{}, false, nil
	}
	if err != nil {
		return artifact.FileEntry{}, false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return artifact.FileEntry{}, false, nil
	}
	entry, err := artifact.HashFile(f, bind)
	if err != nil || entry.SHA256 != bind.Want.SHA256 {
		return artifact.FileEntry{}, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.files[path]; dup {
		return artifact.FileEntry{}, false, fmt.Errorf("payload %q created twice", path)
	}
	if err := b.preflight(0); err != nil {
		return artifact.FileEntry{}, false, err
	}
	if b.budget >= 0 && b.total+size > b.budget {
		return artifact.FileEntry{}, false, b.preflight(size)
	}
	full := filepath.Join(b.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return artifact.FileEntry{}, false, err
	}
	if err := os.Rename(old, full); err != nil {
		return artifact.FileEntry{}, false, err
	}
	w := &fileWriter{path: path, size: size, closed: true, entry: entry, synced: make(chan error, 1)}
	go func() {
		g, err := os.Open(full)
		if err == nil {
			err = syncHardened(g)
			g.Close()
		}
		w.synced <- err
	}()
	b.files[path] = w
	b.total += size
	return entry, true, nil
}

// dropResume removes what the producer did not reuse.
func (b *build) dropResume() error {
	return removeTree(filepath.Join(b.dir, resumeDir))
}

func isReservedPath(path string) bool {
	return isMetadataName(path) || path == resumeDir || path == fileProgress || strings.HasPrefix(path, resumeDir+"/")
}
