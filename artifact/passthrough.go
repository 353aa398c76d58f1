package artifact

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sync/errgroup"
)

// Passthrough is the producer that publishes a checkpoint directory as it is.
const (
	PassthroughName    = "passthrough"
	passthroughVersion = "1"
	passthroughImpl    = "weightsnap passthrough v1: every non-hidden regular file copied verbatim, sha256 checked against the source fingerprint"
)

// PassthroughRef is the passthrough producer's identity fields.
func PassthroughRef() ProducerRef {
	sum := sha256.Sum256([]byte(passthroughImpl))
	return ProducerRef{Name: PassthroughName, Version: passthroughVersion,
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), ManifestSchema: 1, RestorerSchema: 1}
}

// SourceDir is a scanned checkpoint directory (a plain safetensors
// checkpoint or a Hugging Face snapshot directory) with its fingerprint.
type SourceDir struct {
	Root  string
	Files []SourceFile // sorted by path
}

// CheckSourceRoot refuses a root that is no checkpoint directory: a file
// (bad input) or nothing (not found).
func CheckSourceRoot(root string) error {
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such checkpoint directory: %w", root, errdefs.ErrNotFound)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is a file: import takes a checkpoint directory (put the file in a directory of its own and import that): %w", root, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ListSource lists the non-hidden regular files below root (following links,
// as a Hugging Face snapshot is made of links into blobs/) without reading
// them. A link into a hub cache's blobs/<sha256> takes its sha256 from the
// blob's name, which the copy then verifies; other files have none yet.
func ListSource(root string) (*SourceDir, error) {
	if err := CheckSourceRoot(root); err != nil {
		return nil, err
	}
	src := &SourceDir{Root: root}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), ".") && p != root {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f := SourceFile{Path: filepath.ToSlash(rel), Size: fi.Size()}
		if target, err := os.Readlink(p); err == nil {
			if base := filepath.Base(target); IsSHA256Hex(base) && filepath.Base(filepath.Dir(target)) == "blobs" {
				f.SHA256 = base
			}
		}
		src.Files = append(src.Files, f)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("scan %s: %w: %w", root, err, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", root, err)
	}
	if len(src.Files) == 0 {
		return nil, fmt.Errorf("scan %s: no files: %w", root, errdefs.ErrNotFound)
	}
	sort.Slice(src.Files, func(i, j int) bool { return src.Files[i].Path < src.Files[j].Path })
	return src, nil
}

// TotalBytes is the sum of the source files' sizes.
func (s *SourceDir) TotalBytes() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

// Complete reports whether every file's sha256 is known.
func (s *SourceDir) Complete() bool {
	for _, f := range s.Files {
		if f.SHA256 == "" {
			return false
		}
	}
	return true
}

// WithDigests returns the source with each file's sha256 taken from the
// entries of its copy (same paths and sizes), for a single-pass import.
func (s *SourceDir) WithDigests(entries []FileEntry) (*SourceDir, error) {
	byPath := make(map[string]FileEntry, len(entries))
	for _, e := range entries {
		byPath[e.Path] = e
	}
	out := &SourceDir{Root: s.Root, Files: make([]SourceFile, len(s.Files))}
	for i, f := range s.Files {
		e, ok := byPath[f.Path]
		if !ok || e.Size != f.Size || (f.SHA256 != "" && f.SHA256 != e.SHA256) {
			return nil, fmt.Errorf("source file %s was not copied as listed: %w", f.Path, errdefs.ErrDataLoss)
		}
		f.SHA256 = e.SHA256
		out.Files[i] = f
	}
	return out, nil
}

// ScanSource lists the files below root (ListSource) and fingerprints those
// whose sha256 is not known yet, using up to GOMAXPROCS readers. hashed
// reports the bytes read for hashing.
func ScanSource(ctx context.Context, root string) (src *SourceDir, hashed int64, err error) {
	if src, err = ListSource(root); err != nil {
		return nil, 0, err
	}
	var todo []int
	for i, f := range src.Files {
		if f.SHA256 == "" {
			todo = append(todo, i)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range min(runtime.GOMAXPROCS(0), max(len(todo), 1)) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for i := range next {
				sum, _, err := HashSource(ctx, filepath.Join(root, filepath.FromSlash(src.Files[i].Path)), src.Files[i].Path, buf)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				src.Files[i].SHA256 = sum
				hashed += src.Files[i].Size
				mu.Unlock()
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	return src, hashed, nil
}

// Passthrough copies a scanned source directory into an artifact verbatim.
type Passthrough struct {
	Src *SourceDir
	// Progress, if set, is told of every chunk of bytes copied, by one
	// goroutine at a time.
	Progress func(n int64)
}

// Name implements Producer.
func (p *Passthrough) Name() string { return PassthroughName }

// SourceMismatchError says a source file changed between its fingerprint and its copy.
type SourceMismatchError struct {
	Path, Want, Got string
}

func (e *SourceMismatchError) Error() string {
	return fmt.Sprintf("source file %s changed: want %s, got %s", e.Path, e.Want, e.Got)
}

// Unwrap classifies the error.
func (e *SourceMismatchError) Unwrap() error { return errdefs.ErrDataLoss }

// Produce implements Producer: it copies the files through w, FilesInFlight
// at a time, largest first, and checks each copy's sha256 against the
// fingerprint. A file's sha256 is computed in order, on one core: only
// several files at once keep every core hashing. Copies an interrupted
// build kept are adopted first, several at once. The other files are opened
// and created in the store filesAhead ahead of the copies, so a creation
// that waits on the filesystem (allocating the file's blocks) does not leave
// a core idle.
func (p *Passthrough) Produce(ctx context.Context, w Writer) error {
	progress := p.Progress
	if progress != nil {
		var mu sync.Mutex
		progress = func(n int64) {
			mu.Lock()
			p.Progress(n)
			mu.Unlock()
		}
	}
	files := slices.Clone(p.Src.Files)
	slices.SortStableFunc(files, func(a, b SourceFile) int { return cmp.Compare(b.Size, a.Size) })
	files, err := reuseKept(ctx, w, files)
	if err != nil {
		return err
	}
	var total int64
	for _, f := range p.Src.Files {
		total += f.Size
	}
	if err := w.Reserve(total); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	ready := make(chan *verbatimCopy, filesAhead)
	g.Go(func() error {
		defer close(ready)
		for _, sf := range files {
			c, err := prepareVerbatim(w, p.Src.Root, sf)
			if err != nil {
				return err
			}
			select {
			case ready <- c:
			case <-gctx.Done():
				c.in.Close()
				return gctx.Err()
			}
		}
		return nil
	})
	for range FilesInFlight() {
		g.Go(func() error {
			for c := range ready {
				if err := c.run(gctx, progress); err != nil { // at once when gctx is done
					return err
				}
			}
			return nil
		})
	}
	err = g.Wait()
	for c := range ready { // left when the copiers failed
		c.in.Close()
	}
	return err
}

// filesAhead is how many files Produce opens and creates ahead of its copies.
const filesAhead = 2

// FilesInFlight is how many files a producer writes at once by default:
// enough to keep every core hashing, each file's sha256 taking one.
func FilesInFlight() int { return max(2, runtime.GOMAXPROCS(0)/2) }

// CopyVerbatim copies one source file below root through w as it is. A copy
// kept from an interrupted build with the fingerprint's sha256 is reused when
// the writer offers one. The source must not change during the copy, and
// the copy must have the fingerprint's sha256 when it is known. progress, if
// set, is told of every chunk copied.
func CopyVerbatim(ctx context.Context, w Writer, root string, sf SourceFile, progress func(int64)) error {
	todo, err := reuseKept(ctx, w, []SourceFile{sf})
	if err != nil || len(todo) == 0 {
		return err
	}
	c, err := prepareVerbatim(w, root, sf)
	if err != nil {
		return err
	}
	return c.run(ctx, progress)
}

// reuseKept adopts, several at once, the copies an interrupted build of the
// same artifact completed, if the writer holds any (each is read once to
// check its sha256), and returns the files still to copy, in order.
func reuseKept(ctx context.Context, w Writer, files []SourceFile) ([]SourceFile, error) {
	reused := make([]bool, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, sf := range files {
		if sf.SHA256 == "" {
			continue // a kept copy cannot be checked
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			var err error
			_, reused[i], err = w.Reuse(Binding{Want: FileEntry{File: File{Path: sf.Path, Size: sf.Size, SHA256: sf.SHA256}}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var todo []SourceFile
	for i, sf := range files {
		if !reused[i] {
			todo = append(todo, sf)
		}
	}
	return todo, nil
}

// verbatimCopy is a source file opened and its copy created, to be copied.
type verbatimCopy struct {
	sf  SourceFile
	in  *Source
	out FileWriter
}

// prepareVerbatim opens a source file and creates its copy.
func prepareVerbatim(w Writer, root string, sf SourceFile) (*verbatimCopy, error) {
	in, err := OpenSource(filepath.Join(root, filepath.FromSlash(sf.Path)), sf.Path)
	if err != nil {
		return nil, err
	}
	if in.Stamp.Size != sf.Size {
		in.Close()
		return nil, &SourceMismatchError{Path: sf.Path, Want: fmt.Sprintf("%d bytes", sf.Size), Got: fmt.Sprintf("%d bytes", in.Stamp.Size)}
	}
	out, err := w.Create(sf.Path, sf.Size)
	if err != nil {
		in.Close()
		return nil, err
	}
	return &verbatimCopy{sf: sf, in: in, out: out}, nil
}

// run copies the file, closes both ends and checks the copy.
func (c *verbatimCopy) run(ctx context.Context, progress func(int64)) error {
	defer c.in.Close()
	sf := c.sf
	if _, err := CopyTo(ctx, c.out, c.in, sf.Size, progress); err != nil {
		c.out.Close()
		return fmt.Errorf("copy %s: %w", sf.Path, err)
	}
	if err := c.out.Close(); err != nil {
		return err
	}
	e, err := c.out.Entry()
	if err != nil {
		return err
	}
	if err := c.in.Unchanged(); err != nil {
		return err
	}
	if sf.SHA256 != "" && e.SHA256 != sf.SHA256 {
		return &SourceMismatchError{Path: sf.Path, Want: sf.SHA256, Got: e.SHA256}
	}
	return nil
}

// PassthroughIdentity is the identity of a checkpoint directory published as it is.
func PassthroughIdentity(src *SourceDir, repository, revision, component string, tpSize, tpRank int) Identity {
	if component == "" {
		component = "all"
	}
	return Identity{
		Schema:         IdentitySchema,
		Model:          Model{Repository: repository, Revision: revision, Source: src.Files},
		Component:      component,
		Representation: Representation{DType: "source"},
		Layout:         Layout{Name: "source", TPSize: tpSize, TPRank: tpRank},
		Producer:       PassthroughRef(),
	}
}

// fingerprintMismatch says that an artifact's payload disagrees with the
// source fingerprint its passthrough identity names at path: these bytes are
// not the artifact of that identity, an identity collision
// (errdefs.ErrConflict).
func fingerprintMismatch(path, field, want, got string) error {
	return fmt.Errorf("identity collision: passthrough identity's source fingerprint and payload disagree at %s: %s: fingerprint says %q, payload has %q: %w",
		path, field, want, got, errdefs.ErrConflict)
}

// CheckPassthrough checks, for an identity the passthrough producer made,
// that the payload files (sorted by path) are exactly its source
// fingerprint: the same paths, sizes and sha256. Other identities pass.
func (id Identity) CheckPassthrough(files []FileEntry) error {
	if id.Producer.Name != PassthroughName {
		return nil
	}
	src := id.Model.Source
	if len(src) != len(files) {
		return fingerprintMismatch("(all)", "file count", fmt.Sprint(len(src)), fmt.Sprint(len(files)))
	}
	for i, sf := range src {
		f := files[i]
		switch {
		case sf.Path != f.Path:
			return fingerprintMismatch(sf.Path, "path", sf.Path, f.Path)
		case sf.Size != f.Size:
			return fingerprintMismatch(sf.Path, "size", fmt.Sprint(sf.Size), fmt.Sprint(f.Size))
		case sf.SHA256 != f.SHA256:
			return fingerprintMismatch(sf.Path, "sha256", sf.SHA256, f.SHA256)
		}
	}
	return nil
}
