package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

func TestCheckpointRecords(t *testing.T) {
	state := bytes.Repeat([]byte{7}, 108)
	rec := func(path string, off, size int64, st []byte) []byte {
		return progressRecord(recCheckpoint, checkpointBody(path, off, size, st))
	}
	raw := func(off, size uint64, n uint16, st []byte, path string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, off)
		b = binary.LittleEndian.AppendUint64(b, size)
		b = binary.LittleEndian.AppendUint16(b, n)
		return progressRecord(recCheckpoint, append(append(b, st...), path...))
	}
	two := append(rec("a.safetensors", 1<<20, 4<<20, state), rec("b.bin", 9, 9, nil)...)
	for _, tc := range []struct {
		name    string
		data    []byte
		want    map[string]checkpoint
		dataErr bool
	}{
		{"empty", nil, map[string]checkpoint{}, false},
		{"two files", two, map[string]checkpoint{"a.safetensors": {1 << 20, 4 << 20, state}, "b.bin": {9, 9, nil}}, false},
		{"the latest wins", slices.Concat(two, rec("a.safetensors", 2<<20, 4<<20, state)),
			map[string]checkpoint{"a.safetensors": {2 << 20, 4 << 20, state}, "b.bin": {9, 9, nil}}, false},
		{"a record cut short ends them", slices.Concat(two, rec("c", 1, 2, state)[:20]),
			map[string]checkpoint{"a.safetensors": {1 << 20, 4 << 20, state}, "b.bin": {9, 9, nil}}, false},
		{"past the file", raw(5, 4, 1, []byte{1}, "a"), map[string]checkpoint{}, true},
		{"size out of int64", raw(0, 1<<63, 1, []byte{1}, "a"), map[string]checkpoint{}, true},
		{"state longer than the bound", raw(1, 2, artifact.MaxStateLen+1, bytes.Repeat([]byte{1}, artifact.MaxStateLen+1), "a"), map[string]checkpoint{}, true},
		{"state longer than the record", raw(1, 2, 200, []byte{1}, "a"), map[string]checkpoint{}, true},
		{"no state part way", raw(1, 2, 0, nil, "a"), map[string]checkpoint{}, true},
		{"a reserved path", rec(fileProgress, 1, 2, state), map[string]checkpoint{}, true},
		{"a path out of the build", rec("../x", 1, 2, state), map[string]checkpoint{}, true},
		{"another kind", slices.Concat(two, progressRecord(recVerified, make([]byte, 20))),
			map[string]checkpoint{"a.safetensors": {1 << 20, 4 << 20, state}, "b.bin": {9, 9, nil}}, true},
		{"a record of 4 GiB", slices.Concat(two, []byte{recCheckpoint, 0xff, 0xff, 0xff, 0xff}), map[string]checkpoint{"a.safetensors": {1 << 20, 4 << 20, state}, "b.bin": {9, 9, nil}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readCheckpoints(iotest.HalfReader(bytes.NewReader(tc.data)))
			if tc.dataErr != errdefs.IsDataLoss(err) || (!tc.dataErr && err != nil) {
				t.Fatalf("error %v, want data loss %v", err, tc.dataErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("records %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzCheckpoints: a checkpoint file read as it streams, in reads of any
// size, gives the records it gives read whole, each within its bounds.
func FuzzCheckpoints(f *testing.F) {
	state := bytes.Repeat([]byte{7}, 108)
	valid := progressRecord(recCheckpoint, checkpointBody("a.safetensors", 1<<20, 4<<20, state))
	f.Add(append(valid, progressRecord(recCheckpoint, checkpointBody("a.safetensors", 4<<20, 4<<20, nil))...))
	f.Add(valid[:30])
	f.Add([]byte{recCheckpoint, 0xff, 0xff, 0xff, 0xff})
	f.Add(progressRecord(recCheckpoint, checkpointBody("x", 1<<62, 1<<62+1, state)))
	f.Fuzz(func(t *testing.T, data []byte) {
		whole, werr := readCheckpoints(bytes.NewReader(data))
		bytewise, berr := readCheckpoints(iotest.OneByteReader(bytes.NewReader(data)))
		if (werr == nil) != (berr == nil) || !reflect.DeepEqual(whole, bytewise) {
			t.Fatalf("whole %v (%v), byte by byte %v (%v)", whole, werr, bytewise, berr)
		}
		for path, c := range whole {
			if c.off < 0 || c.off > c.size || len(c.state) > artifact.MaxStateLen || (len(c.state) == 0) != (c.off == c.size) {
				t.Fatalf("record of %q out of bounds: %+v", path, c)
			}
		}
	})
}

// keptFile is a safetensors file of about 8 MiB and its binding as a pull
// writes it: its tensors and tree checked as it is written.
func keptFile(t *testing.T) ([]byte, artifact.Binding) {
	t.Helper()
	dir := t.TempDir()
	if err := synth.Write(context.Background(), dir, synth.Options{Size: 8 << 20, Shards: 1, DType: "BF16", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(m) != 1 {
		t.Fatalf("synthesised %v", m)
	}
	name := filepath.Base(m[0])
	data, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	entry, err := artifact.HashFile(bytes.NewReader(data), artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: name, Size: int64(len(data))}}})
	if err != nil {
		t.Fatal(err)
	}
	return data, artifact.Binding{Want: entry, By: artifact.BindTreeStream}
}

// stopPart way writes the first n bytes of data through a build of
// identity, checkpointing every MiB, and stops it as an interrupted
// producer does; it returns what the build says it kept.
func stopPartWay(t *testing.T, d *Domain, identity artifact.Identity, data []byte, bind artifact.Binding, n int64) int64 {
	t.Helper()
	id, _ := identity.ID()
	b, err := d.newBuild(context.Background(), identity, id, id.Hex())
	if err != nil {
		t.Fatal(err)
	}
	b.ckEvery = 1 << 20
	b.adoptStale()
	w, err := b.CreateBound(bind)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < n; off += 256 << 10 {
		if _, err := w.Write(data[off:min(off+256<<10, n)]); err != nil {
			t.Fatal(err)
		}
	}
	return b.release()
}

// TestContinueKeptPrefix: a build stopped part way keeps its verified
// prefix; the next build of the identity continues from its last record,
// whatever a crash or a lie left on disk, and publishes only the right bytes.
func TestContinueKeptPrefix(t *testing.T) {
	ckFile := func(d *Domain) string {
		m, _ := filepath.Glob(d.path(dirTmp, "*", fileCheckpoint))
		if len(m) != 1 {
			t.Fatalf("checkpoint files %v", m)
		}
		return m[0]
	}
	payload := func(d *Domain, path string) string {
		m, _ := filepath.Glob(d.path(dirTmp, "*", path))
		if len(m) != 1 {
			t.Fatalf("kept files %v", m)
		}
		return m[0]
	}
	for _, tc := range []struct {
		name string
		// harm changes the kept build; want is where the next build
		// continues (1: where the stopped build kept; -1: at an earlier
		// record; 0: from the start).
		harm func(t *testing.T, d *Domain, path string)
		want int64
	}{
		{"clean stop", nil, 1},
		{"crash between the sync and its record", func(t *testing.T, d *Domain, _ string) {
			// The bytes are synced to the stop, the last record lost.
			p := ckFile(d)
			raw, _ := os.ReadFile(p)
			cut := len(raw)
			for at := 0; at < len(raw); {
				size := int(binary.LittleEndian.Uint32(raw[at+1:]))
				if at+recHeader+size == len(raw) {
					cut = at
				}
				at += recHeader + size
			}
			if err := os.WriteFile(p, raw[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
		}, -1},
		{"a torn last record", func(t *testing.T, d *Domain, path string) {
			f, err := os.OpenFile(ckFile(d), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.Write(progressRecord(recCheckpoint, checkpointBody(path, 7<<20, 8<<20, make([]byte, 108)))[:40])
		}, 1},
		{"prefix bytes changed on disk", func(t *testing.T, d *Domain, path string) {
			corrupt(t, payload(d, path), 3<<20)
		}, 0},
		{"a sha256 state (an earlier binding's)", func(t *testing.T, d *Domain, path string) {
			kept := keptAt(t, ckFile(d), path)
			st, _ := sha256.New().(encoding.BinaryMarshaler).MarshalBinary()
			appendCheckpoint(t, ckFile(d), path, kept.off, kept.size, st)
		}, 0},
		{"a corrupt state", func(t *testing.T, d *Domain, path string) {
			kept := keptAt(t, ckFile(d), path)
			appendCheckpoint(t, ckFile(d), path, kept.off, kept.size, []byte("not a sha256 state"))
		}, 0},
		{"an offset where no part ends", func(t *testing.T, d *Domain, path string) {
			kept := keptAt(t, ckFile(d), path)
			appendCheckpoint(t, ckFile(d), path, kept.off-1, kept.size, kept.state)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			d := openTestDomain(t)
			data, bind := keptFile(t)
			path := bind.Want.Path
			identity := testIdentity()
			identity.Model.Revision = "fedcba9876543210fedcba9876543210fedcba98"
			id, _ := identity.ID()
			kept := stopPartWay(t, d, identity, data, bind, 5<<20)
			if kept < 4<<20 || kept > 5<<20 {
				t.Fatalf("kept %d bytes, want the last tensor end before %d", kept, 5<<20)
			}
			if tc.harm != nil {
				tc.harm(t, d, path)
			}
			b, err := d.newBuild(context.Background(), identity, id, id.Hex())
			if err != nil {
				t.Fatal(err)
			}
			b.adoptStale()
			var w artifact.FileWriter
			fw, off, ok, err := b.Continue(bind)
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.want == 0 && ok:
				t.Fatalf("continued at %d, want a new file", off)
			case tc.want > 0 && (!ok || off != kept):
				t.Fatalf("continued %v at %d, want %d", ok, off, kept)
			case tc.want < 0 && (!ok || off <= 0 || off >= kept):
				t.Fatalf("continued %v at %d, want an earlier record", ok, off)
			}
			if ok {
				w = fw
			} else if w, err = b.CreateBound(bind); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(data[off:]); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.publish(ctx, "test", farFuture()); err != nil {
				t.Fatal(err)
			}
			l, err := d.Lookup(ctx, id, FullChecksum)
			if err != nil {
				t.Fatalf("the continued artifact: %v", err)
			}
			defer l.Close()
			got, err := os.ReadFile(filepath.Join(l.Dir, path))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("published bytes differ (%v)", err)
			}
			for _, name := range []string{fileCheckpoint, dirResume} {
				if _, err := os.Lstat(filepath.Join(l.Dir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s published: %v", name, err)
				}
			}
		})
	}
}

func openTestDomain(t *testing.T) *Domain {
	t.Helper()
	d, err := Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keptAt is the last record of path in a checkpoint file.
func keptAt(t *testing.T, file, path string) checkpoint {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs, err := readCheckpoints(f)
	if err != nil || cs[path].off == 0 {
		t.Fatalf("records %v (%v)", cs, err)
	}
	return cs[path]
}

func appendCheckpoint(t *testing.T, file, path string, off, size int64, state []byte) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(progressRecord(recCheckpoint, checkpointBody(path, off, size, state))); err != nil {
		t.Fatal(err)
	}
}

// corrupt flips the bits of two bytes of a file at off.
func corrupt(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 2)
	f.ReadAt(b, off)
	b[0], b[1] = ^b[0], ^b[1]
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
