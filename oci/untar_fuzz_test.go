package oci

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// FuzzExtractLayer fuzzes a tar layer's extraction as a pull runs it: the
// layer's bytes (under its own digest, so only the tar can be refused)
// streamed through extractLayer in pieces cut at random points. The
// verdict and the files never depend on the cuts; an accepted layer's
// files are clean paths under the layer's path, each written whole, within
// the bounds.
func FuzzExtractLayer(f *testing.F) {
	for _, c := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		mode := map[Compression]byte{CompressionNone: 0, CompressionGzip: 1, CompressionZstd: 2}[c]
		f.Add(compress(f, c, makeTar(f, []tarEntry{dir("m/"), file("m/a.safetensors", "AAAA"), file("m/sub/b", "{}")}, "")), mode, []byte{3, 100, 7})
		f.Add(compress(f, c, makeTar(f, []tarEntry{file("m/a", "1"), special('2', "m/l", "../x")}, "")), mode, []byte{1})
		f.Add(compress(f, c, makeTar(f, []tarEntry{{hdr: file("m/a", "").hdr, data: "short", raw: strings.Repeat("x", 600)}}, "")), mode, []byte{200, 0, 9})
	}
	f.Fuzz(func(t *testing.T, blob []byte, mode byte, cuts []byte) {
		comp := []Compression{CompressionNone, CompressionGzip, CompressionZstd}[int(mode)%3]
		a := archiveOf("m", comp, blob)
		lim := tarLimits{Entries: 64, Bytes: 1 << 20}
		whole, werr := extractFuzz(a, bytes.NewReader(blob), lim)
		cut, cerr := extractFuzz(a, &cutReader{b: blob, cuts: cuts}, lim)
		if (werr == nil) != (cerr == nil) || (werr != nil && werr.Error() != cerr.Error()) {
			t.Fatalf("cuts %v changed the verdict: %v, then %v", cuts, werr, cerr)
		}
		if werr != nil {
			return
		}
		if len(whole) != len(cut) {
			t.Fatalf("cuts %v changed the files", cuts)
		}
		var total int64
		for i, file := range whole {
			if file != cut[i] {
				t.Fatalf("cuts %v changed %+v to %+v", cuts, file, cut[i])
			}
			if artifact.ValidateRelPath(file.Path) != nil || (file.Path != "m" && !strings.HasPrefix(file.Path, "m/")) || file.Size < 0 {
				t.Fatalf("accepted file %+v", file)
			}
			total += file.Size
		}
		if total > lim.Bytes {
			t.Fatalf("%d bytes extracted, bound %d", total, lim.Bytes)
		}
	})
}

// extractFuzz extracts a layer into memory, checking that every file the
// extraction wrote is closed and whole.
func extractFuzz(a PlanArchive, r io.Reader, lim tarLimits) ([]artifact.File, error) {
	w := &storetest.MemWriter{SHA256Only: true}
	files, err := extractLayer(context.Background(), r, a, w, lim)
	if open := w.Unclosed(); len(open) > 0 {
		return nil, errors.New("file " + open[0] + " left open")
	}
	if err == nil && len(files) != len(w.Paths()) {
		return nil, errors.New("files written and reported differ")
	}
	return files, err
}

// cutReader reads b in pieces of the sizes cuts gives, in turn.
type cutReader struct {
	b    []byte
	cuts []byte
	i    int
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(r.cuts) > 0 {
		n = min(n, int(r.cuts[r.i%len(r.cuts)])+1)
		r.i++
	}
	n = copy(p, r.b[:min(n, len(r.b))])
	r.b = r.b[n:]
	return n, nil
}
