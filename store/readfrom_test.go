package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// splitReader returns its bytes in reads of the given sizes, in turn.
type splitReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *splitReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// readFromProducer writes every source file through the store writer's
// ReadFrom, each from the reader that open gives it.
func readFromProducer(src *artifact.SourceDir, open func(data []byte) io.Reader) artifact.Producer {
	return artifact.ProducerFunc{ProducerName: "readfrom", Fn: func(ctx context.Context, w artifact.Writer) error {
		for _, sf := range src.Files {
			data, err := os.ReadFile(filepath.Join(src.Root, sf.Path))
			if err != nil {
				return err
			}
			fw, err := w.Create(sf.Path, sf.Size)
			if err != nil {
				return err
			}
			rf, ok := fw.(io.ReaderFrom)
			if !ok {
				fw.Close()
				return errors.New("the store's file writer reads no io.Reader")
			}
			n, err := rf.ReadFrom(open(data))
			if cerr := fw.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if n != sf.Size {
				return io.ErrUnexpectedEOF
			}
		}
		return nil
	}}
}

// TestReadFromEqualsHashFile: files read into the writer's own buffers, from
// readers that return the bytes in reads of any size, publish exactly the
// entries the hasher computes for the same files.
func TestReadFromEqualsHashFile(t *testing.T) {
	_, src := storetest.Checkpoint(t, 6<<20, 3)
	for _, tc := range []struct {
		name string
		open func([]byte) io.Reader
	}{
		{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"odd splits", func(b []byte) io.Reader {
			return &splitReader{data: b, sizes: []int{1, 7, 4093, 1 << 20, 3 << 20, 65537}}
		}},
		{"data then EOF", func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { buildEqualsHashed(t, src, readFromProducer(src, tc.open)) })
	}
}

// buildEqualsHashed builds src's passthrough artifact in a new store with
// p and fails unless it publishes exactly the entries the hasher alone
// computes for the same files, and the files on disk pass a full check.
func buildEqualsHashed(t *testing.T, src *artifact.SourceDir, p artifact.Producer) {
	t.Helper()
	var want []artifact.FileEntry
	for _, sf := range src.Files {
		f, err := os.Open(filepath.Join(src.Root, sf.Path))
		if err != nil {
			t.Fatal(err)
		}
		e, err := artifact.HashFile(f, artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: sf.Path, Size: sf.Size}}})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	d := storetest.Open(t)
	l, _, err := d.GetOrBuild(context.Background(), storetest.Identity(src), p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Index.Files; !equalEntries(got, want) {
		t.Fatalf("entries differ:\n got %+v\nwant %+v", got, want)
	}
	// The bytes on disk, not only those the writer hashed.
	full, err := d.Lookup(context.Background(), l.ID, store.FullChecksum)
	if err != nil {
		t.Fatalf("full check of what was written: %v", err)
	}
	full.Close()
}

func equalEntries(a, b []artifact.FileEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if artifact.CompareEntry(a[i], b[i]) != nil {
			return false
		}
	}
	return true
}

// TestReadFromRefusesOtherLengths: a source longer than the declared size
// fails with ErrOutOfRange, a reader's failure comes back unwrapped (so
// artifact.CopyTo can tell it from the store's), and nothing is published.
func TestReadFromRefusesOtherLengths(t *testing.T) {
	_, src := storetest.Checkpoint(t, 3<<20, 2)
	id := storetest.Identity(src)
	broken := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		open func([]byte) io.Reader
		want error
	}{
		{"longer", func(b []byte) io.Reader { return io.MultiReader(bytes.NewReader(b), bytes.NewReader([]byte{0})) }, errdefs.ErrOutOfRange},
		{"failing", func(b []byte) io.Reader {
			return io.MultiReader(bytes.NewReader(b[:len(b)/2]), iotest.ErrReader(broken))
		}, broken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := storetest.Open(t)
			_, _, err := d.GetOrBuild(context.Background(), id, readFromProducer(src, tc.open))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			hex, _ := id.ID()
			if _, err := d.Lookup(context.Background(), hex, ""); !errors.Is(err, store.ErrMiss) {
				t.Fatalf("lookup after a failed build: %v, want a miss", err)
			}
		})
	}
}
