package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// tarEntry is one entry of a test tar: its header (the size taken from
// data unless set) and data; cut, if set, ends the archive after that many
// bytes of the data, with no end marker; raw is written after the entry,
// outside tar's framing.
type tarEntry struct {
	hdr  tar.Header
	data string
	cut  int
	raw  string
}

func file(name, data string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, data: data}
}

func dir(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func special(typ byte, name, link string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: typ, Name: name, Linkname: link, Mode: 0o644}}
}

// makeTar writes the entries as a tar stream, then trailer.
func makeTar(tb testing.TB, entries []tarEntry, trailer string) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			tb.Fatal(err)
		}
		if e.cut > 0 {
			tw.Write([]byte(e.data[:e.cut]))
			return buf.Bytes() // the stream ends inside the entry
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			tb.Fatal(err)
		}
		if e.raw != "" {
			tw.Flush()
			buf.WriteString(e.raw)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return append(buf.Bytes(), trailer...)
}

// compress compresses a tar stream as c does.
func compress(tb testing.TB, c Compression, b []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	switch c {
	case CompressionGzip:
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
	case CompressionZstd:
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			tb.Fatal(err)
		}
		zw.Write(b)
		zw.Close()
	default:
		return b
	}
	return buf.Bytes()
}

// archiveOf is the plan of a tar layer of blob at path.
func archiveOf(path string, c Compression, blob []byte) PlanArchive {
	mt := "application/vnd.cncf.model.weight.v1.tar"
	if c != CompressionNone {
		mt += "+" + string(c)
	}
	l := descriptorOf(mt, blob)
	l.Annotations = map[string]string{AnnotationFilepath: path}
	return PlanArchive{Path: path, Layer: l, Compression: c}
}

var testLimits = tarLimits{Entries: 8, Bytes: 1 << 20}

// TestExtractLayer: good layers extract every regular file at its path in
// each compression; hostile ones are refused as invalid input naming the
// layer digest and the entry.
func TestExtractLayer(t *testing.T) {
	big := strings.Repeat("w", 2000)
	cases := []struct {
		name    string
		entries []tarEntry
		trailer string
		lim     tarLimits
		want    map[string]string // files extracted; nil: refused
		refusal string            // in the error
	}{
		{name: "directory", entries: []tarEntry{dir("m/"), file("m/a.safetensors", "AAAA"), dir("m/sub/"), file("m/sub/b.json", "{}"), file("m/empty", "")},
			want: map[string]string{"m/a.safetensors": "AAAA", "m/sub/b.json": "{}", "m/empty": ""}},
		{name: "dot prefix and root", entries: []tarEntry{dir("./"), file("./m/x", "xx")}, want: map[string]string{"m/x": "xx"}},
		{name: "one file", entries: []tarEntry{file("m", big)}, trailer: strings.Repeat("\x00", 10240), want: map[string]string{"m": big}},
		{name: "pax global header", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "x"}}}, file("m/a", "a")},
			want: map[string]string{"m/a": "a"}},

		{name: "dotdot", entries: []tarEntry{file("m/../../etc/passwd", "x")}, refusal: "not a clean relative path"},
		{name: "dotdot prefix", entries: []tarEntry{file("../m/a", "x")}, refusal: "not a clean relative path"},
		{name: "absolute", entries: []tarEntry{file("/etc/passwd", "x")}, refusal: "not a clean relative path"},
		{name: "outside the layer's path", entries: []tarEntry{file("other/a", "x")}, refusal: "outside the layer's path"},
		{name: "symlink out", entries: []tarEntry{dir("m/"), special(tar.TypeSymlink, "m/l", "../../etc/shadow")}, refusal: "a link"},
		{name: "hardlink", entries: []tarEntry{file("m/a", "x"), special(tar.TypeLink, "m/b", "m/a")}, refusal: "a link"},
		{name: "char device", entries: []tarEntry{special(tar.TypeChar, "m/null", "")}, refusal: "only regular files"},
		{name: "block device", entries: []tarEntry{special(tar.TypeBlock, "m/sda", "")}, refusal: "only regular files"},
		{name: "fifo", entries: []tarEntry{special(tar.TypeFifo, "m/p", "")}, refusal: "only regular files"},
		{name: "size lies: short stream", entries: []tarEntry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "m/a", Size: 1000}, data: strings.Repeat("x", 1000), cut: 600}},
			refusal: "reading its data"},
		{name: "size lies: data beyond it", entries: []tarEntry{{hdr: file("m/a", "").hdr, data: "short", raw: strings.Repeat("x", 1024)}},
			refusal: "reading the header after it"},
		{name: "trailing garbage", entries: []tarEntry{file("m/a", "a")}, trailer: "\x00\x00junk", refusal: "data after the end"},
		{name: "oversized entry", entries: []tarEntry{file("m/a", big)}, lim: tarLimits{Entries: 8, Bytes: 1000}, refusal: "more than the 1000"},
		{name: "too many entries", entries: []tarEntry{dir("m/"), file("m/a", "a"), file("m/b", "b")}, lim: tarLimits{Entries: 2, Bytes: 1000}, refusal: "more than 2 entries"},
		{name: "duplicate path", entries: []tarEntry{file("m/a", "1"), file("m/a", "2")}, refusal: "repeats"},
		{name: "file then directory", entries: []tarEntry{file("m/a", "1"), dir("m/a/")}, refusal: "repeats"},
		{name: "directory then file", entries: []tarEntry{dir("m/a/"), file("m/a", "1")}, refusal: "repeats"},
		{name: "path through a file", entries: []tarEntry{file("m/a", "1"), file("m/a/b", "2")}, refusal: "below the file"},
		{name: "parent then file", entries: []tarEntry{file("m/a/b", "1"), file("m/a", "2")}, refusal: "a file where"},
	}
	for _, c := range cases {
		for _, comp := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
			t.Run(c.name+"/"+string(comp), func(t *testing.T) {
				lim := c.lim
				if lim.Entries == 0 {
					lim = testLimits
				}
				blob := compress(t, comp, makeTar(t, c.entries, c.trailer))
				a := archiveOf("m", comp, blob)
				w := &storetest.MemWriter{SHA256Only: true}
				files, err := extractLayer(context.Background(), bytes.NewReader(blob), a, w, lim)
				if c.want == nil {
					if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), a.Layer.Digest.String()) {
						t.Fatalf("want a refusal with %q naming the layer, got %v", c.refusal, err)
					}
					t.Log(err)
					if open := w.Unclosed(); len(open) > 0 {
						t.Fatalf("%v left open", open)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(files) != len(c.want) || len(w.Paths()) != len(c.want) {
					t.Fatalf("files %+v, want %v", files, c.want)
				}
				for _, f := range files {
					data, ok := c.want[f.Path]
					sum := sha256.Sum256([]byte(data))
					if got, _ := w.Bytes(f.Path); !ok || string(got) != data || f.SHA256 != hex.EncodeToString(sum[:]) {
						t.Fatalf("file %+v", f)
					}
				}
			})
		}
	}
}

// TestExtractLayerChecksTheLayer: a layer whose bytes are not its digest's,
// or not its size, is refused after extraction: the build holding its files
// is then discarded.
func TestExtractLayerChecksTheLayer(t *testing.T) {
	blob := makeTar(t, []tarEntry{file("m/a", "a")}, "")
	a := archiveOf("m", CompressionNone, blob)
	other := a
	other.Layer.Digest = digest.FromString("other")
	if _, err := extractLayer(context.Background(), bytes.NewReader(blob), other, &storetest.MemWriter{SHA256Only: true}, testLimits); !errdefs.IsDataLoss(err) {
		t.Fatalf("digest mismatch: %v", err)
	}
	longer := a
	longer.Layer.Size += 512
	if _, err := extractLayer(context.Background(), bytes.NewReader(blob), longer, &storetest.MemWriter{SHA256Only: true}, testLimits); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("size mismatch: %v", err)
	}
	gz := archiveOf("m", CompressionGzip, blob) // not gzip at all
	if _, err := extractLayer(context.Background(), bytes.NewReader(blob), gz, &storetest.MemWriter{SHA256Only: true}, testLimits); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("not gzip: %v", err)
	}
	zs := compress(t, CompressionZstd, blob)
	za := archiveOf("m", CompressionZstd, append(zs, "tail"...))
	if _, err := extractLayer(context.Background(), bytes.NewReader(append(zs, "tail"...)), za, &storetest.MemWriter{SHA256Only: true}, testLimits); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("bytes after the zstd stream: %v", err)
	}
	// A failed read of the stream is the stream's failure, not the layer's.
	broken := io.MultiReader(bytes.NewReader(blob[:700]), iotestErrReader{errdefs.ErrUnavailable})
	if _, err := extractLayer(context.Background(), broken, a, &storetest.MemWriter{SHA256Only: true}, testLimits); !errdefs.IsUnavailable(err) {
		t.Fatalf("broken stream: %v", err)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// TestLimitsFor: an uncompressed layer extracts no more than it holds; a
// compressed one a bounded multiple, without overflow.
func TestLimitsFor(t *testing.T) {
	a := PlanArchive{Layer: ocispec.Descriptor{Size: 1 << 30}}
	if l := limitsFor(a); l.Bytes != 1<<30 || l.Entries != maxTarEntries {
		t.Fatalf("uncompressed: %+v", l)
	}
	a.Compression = CompressionZstd
	if l := limitsFor(a); l.Bytes != maxUnpackRatio<<30 {
		t.Fatalf("zstd: %+v", l)
	}
	a.Layer.Size = 1 << 62
	if l := limitsFor(a); l.Bytes <= 0 {
		t.Fatalf("overflow: %+v", l)
	}
}
