package oci

// The tar layers of foreign artifacts (ModelPack's .tar, .tar+gzip and
// .tar+zstd layers, oras's tarred directories): each is read once, hashed
// and extracted into the store's build as it is read, every entry checked
// first.

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
)

// PlanArchive is one tar layer of a foreign artifact, extracted at the artifact's root. modctl's
// and oras's pulls extract it there too. The layer's path, by ModelPack filepath or oras title, is
// the file or directory that was tarred. Every entry's name repeats that path, so each entry must
// be that path or lie below it.
type PlanArchive struct {
	Path        string
	Layer       ocispec.Descriptor
	Compression Compression
}

// Compression is how a tar layer is compressed.
type Compression string

// Compressions of tar layers.
const (
	CompressionNone Compression = ""
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
)

// archiveCompression is the compression a layer's media type names.
func archiveCompression(mediaType string) Compression {
	switch {
	case strings.HasSuffix(mediaType, "+gzip"), strings.HasSuffix(mediaType, ".gzip"):
		return CompressionGzip
	case strings.HasSuffix(mediaType, "+zstd"), strings.HasSuffix(mediaType, ".zstd"):
		return CompressionZstd
	}
	return CompressionNone
}

// The unpack producer: what an identity with tar layers names as its
// producer, pinning how their files are laid out.
const (
	unpackName    = "oci-unpack"
	unpackVersion = "1"
	unpackImpl    = "weightsnap oci-unpack v1: raw file layers copied verbatim at their path; tar, tar+gzip and tar+zstd layers extracted at the artifact's root, regular files and directories only, each entry at or below its layer's path; every layer's sha256 checked against its digest"
)

func unpackRef() artifact.ProducerRef {
	sum := sha256.Sum256([]byte(unpackImpl))
	return artifact.ProducerRef{Name: unpackName, Version: unpackVersion,
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), ManifestSchema: 1, RestorerSchema: 1}
}

// tarLimits bound what one tar layer may extract.
type tarLimits struct {
	Entries int   // entries of every kind
	Bytes   int64 // file bytes (and padding after the archive), all files together
}

// Bounds of a tar layer: at most maxTarEntries entries; no more bytes than
// the layer holds when it is uncompressed, else maxUnpackRatio times the
// layer, at least minUnpackBytes (model weights barely compress; text a few
// times; only a crafted layer expands a thousandfold).
const (
	maxTarEntries  = 100_000
	maxUnpackRatio = 1024
	minUnpackBytes = 64 << 20
	// maxZstdWindow is the zstd CLI's default decoding limit (--long's window).
	maxZstdWindow = 128 << 20
)

// limitsFor is the bound of a tar layer.
func limitsFor(a PlanArchive) tarLimits {
	n := a.Layer.Size
	if a.Compression != CompressionNone {
		n = max(minUnpackBytes, n)
		if n > math.MaxInt64/maxUnpackRatio {
			n = math.MaxInt64
		} else {
			n *= maxUnpackRatio
		}
	}
	return tarLimits{Entries: maxTarEntries, Bytes: n}
}

// tarError is a tar layer refused: invalid input naming the layer and,
// when there is one, the entry.
func tarError(a PlanArchive, entry, format string, args ...any) error {
	s := fmt.Sprintf("tar layer %s (%s)", a.Layer.Digest, a.Path)
	if entry != "" {
		s += fmt.Sprintf(": entry %q", entry)
	}
	return fmt.Errorf("%s: %s: %w", s, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// extractLayer reads a tar layer's bytes from src, exactly its size, and
// writes each of its regular files through w, checking every entry as it
// comes (checkEntry) and the whole layer's sha256 against its digest at the
// end; it returns the files. On an error the files written are the
// build's to discard: nothing of the layer may be published.
func extractLayer(ctx context.Context, src io.Reader, a PlanArchive, w artifact.Writer, lim tarLimits) ([]artifact.File, error) {
	h := sha256.New()
	raw := &countingReader{r: io.TeeReader(io.LimitReader(src, a.Layer.Size+1), h)}
	files, err := untar(ctx, raw, a, w, lim)
	if err != nil {
		return nil, err
	}
	if n, err := io.Copy(io.Discard, raw); err != nil {
		return nil, err
	} else if n > 0 {
		return nil, tarError(a, "", "%d bytes after the end of the compressed stream", n)
	}
	if raw.n != a.Layer.Size {
		return nil, tarError(a, "", "the layer has %d bytes, its descriptor says %d", raw.n, a.Layer.Size)
	}
	if got := digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil)); got != a.Layer.Digest {
		return nil, registry.DigestMismatch(a.Path, a.Layer.Digest.String(), got.String())
	}
	return files, nil
}

// untar decompresses raw and extracts its archive, then checks that only
// zeros follow the archive's end.
func untar(ctx context.Context, raw *countingReader, a PlanArchive, w artifact.Writer, lim tarLimits) ([]artifact.File, error) {
	var dec io.Reader = raw
	switch a.Compression {
	case CompressionGzip:
		zr, err := gzip.NewReader(raw)
		if err != nil {
			if raw.err != nil {
				return nil, raw.err
			}
			return nil, tarError(a, "", "not gzip: %v", err)
		}
		defer zr.Close()
		dec = zr
	case CompressionZstd:
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		dec = zr
	}
	x := &extraction{ctx: ctx, a: a, w: w, lim: lim, raw: raw, seen: map[string]entryKind{}}
	if err := x.run(dec); err != nil {
		return nil, err
	}
	return x.files, nil
}

type entryKind int

const (
	kindFile   entryKind = iota + 1
	kindDir              // a directory entry
	kindParent           // a directory only named as a parent
)

// extraction is the state of one tar layer's extraction.
type extraction struct {
	ctx     context.Context
	a       PlanArchive
	w       artifact.Writer
	lim     tarLimits
	raw     *countingReader // the layer's bytes
	seen    map[string]entryKind
	entries int
	bytes   int64
	files   []artifact.File
}

func (x *extraction) run(dec io.Reader) error {
	tr := tar.NewReader(dec)
	last := ""
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return x.trailer(dec, last)
		}
		if err != nil {
			return x.readError(err, last, "reading the header after it")
		}
		x.entries++
		if x.entries > x.lim.Entries {
			return tarError(x.a, hdr.Name, "more than %d entries", x.lim.Entries)
		}
		name, err := x.checkEntry(hdr)
		if err != nil {
			return err
		}
		last = hdr.Name
		if name == "" || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if err := x.extract(tr, hdr, name); err != nil {
			return err
		}
	}
}

// checkEntry checks an entry before any of its bytes is used and returns
// the path of its file ("" for an entry that writes nothing): a regular
// file or a directory, its size within the layer's bound, its name a clean
// relative path at or below the layer's path, never repeated and never
// below a file.
func (x *extraction) checkEntry(hdr *tar.Header) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", tarError(x.a, hdr.Name, format, args...)
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader: // pax global metadata (git archive writes one): no file
		return "", nil
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		return bad("a link (to %q): only regular files and directories are extracted", hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return bad("a %s: only regular files and directories are extracted", map[byte]string{tar.TypeChar: "character device",
			tar.TypeBlock: "block device", tar.TypeFifo: "fifo"}[hdr.Typeflag])
	default:
		return bad("type %q: only regular files and directories are extracted", hdr.Typeflag)
	}
	// The size is untrusted: checked as non-negative and against what is
	// left of the bound before anything is sized by it.
	left := x.lim.Bytes - x.bytes
	switch {
	case hdr.Size < 0:
		return bad("negative size %d", hdr.Size)
	case hdr.Typeflag == tar.TypeDir && hdr.Size != 0:
		return bad("a directory of %d bytes", hdr.Size)
	case hdr.Size > left:
		return bad("%d bytes, more than the %d the layer may still extract (of %d)", hdr.Size, left, x.lim.Bytes)
	}
	name := strings.TrimPrefix(hdr.Name, "./")
	if hdr.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
		if name == "" || name == "." {
			return "", nil // the archive's root
		}
	}
	if err := artifact.ValidateRelPath(name); err != nil || name == "." {
		return bad("not a clean relative path")
	}
	if name != x.a.Path && !strings.HasPrefix(name, x.a.Path+"/") {
		return bad("outside the layer's path %q", x.a.Path)
	}
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		switch x.seen[d] {
		case kindFile:
			return bad("below the file %q", d)
		case 0:
			x.seen[d] = kindParent
		}
	}
	switch k := x.seen[name]; {
	case k == kindFile, k == kindDir:
		return bad("repeats an earlier entry")
	case k == kindParent && hdr.Typeflag == tar.TypeReg:
		return bad("a file where an earlier entry has a directory")
	}
	if hdr.Typeflag == tar.TypeDir {
		x.seen[name] = kindDir
		return "", nil
	}
	x.seen[name] = kindFile
	x.bytes += hdr.Size
	return name, nil
}

// extract writes one regular file of exactly its header's size.
func (x *extraction) extract(tr *tar.Reader, hdr *tar.Header, name string) error {
	fw, err := x.w.Create(name, hdr.Size)
	if err != nil {
		return tarError(x.a, hdr.Name, "%v", err)
	}
	if _, err := artifact.CopyTo(x.ctx, fw, tr, hdr.Size, nil); err != nil {
		fw.Close()
		var se *artifact.SourceError
		if errors.As(err, &se) {
			return x.readError(se.Err, hdr.Name, "reading its data")
		}
		return err
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("tar layer %s: %s: %w", x.a.Layer.Digest, name, err)
	}
	e, err := fw.Entry()
	if err != nil {
		return err
	}
	x.files = append(x.files, e.File)
	return nil
}

// readError is a failed read of the archive after entry last: a
// cancelled context or a failed read of the layer's stream is returned as
// it is; anything else (a stream that ends early, a header that does not
// parse, a corrupt compressed stream: an entry's size that lies among them)
// is the layer's fault.
func (x *extraction) readError(err error, last, what string) error {
	if x.ctx.Err() != nil {
		return x.ctx.Err()
	}
	if x.raw.err != nil {
		return x.raw.err
	}
	return tarError(x.a, last, "%s: %v (a truncated or corrupt layer, or an entry's size that lies)", what, err)
}

// trailer checks what follows the archive's end: zeros only (tar pads its
// last record), within the layer's bound.
func (x *extraction) trailer(dec io.Reader, last string) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := dec.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return tarError(x.a, last, "data after the end of the archive")
			}
		}
		x.bytes += int64(n)
		if x.bytes > x.lim.Bytes {
			return tarError(x.a, last, "more than %d bytes", x.lim.Bytes)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return x.readError(err, last, "reading the end of the archive")
		}
	}
}

// countingReader counts the bytes read through it and keeps its failure.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
