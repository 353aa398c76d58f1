package oci

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// lastCheckpoint is the last record of path in a kept build's checkpoint
// file (docs/formats.md): its offset, the file's size and the file.
func lastCheckpoint(t *testing.T, d *store.Domain, path string) (off, size int64, file string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(d.Root(), "tmp", "*", ".checkpoint"))
	if len(m) != 1 {
		t.Fatalf("checkpoint files %v", m)
	}
	raw, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	for at := 0; at+5 <= len(raw); {
		n := int(binary.LittleEndian.Uint32(raw[at+1:]))
		body := raw[at+5 : at+5+n]
		st := int(binary.LittleEndian.Uint16(body[16:]))
		if string(body[18+st:]) == path {
			off, size = int64(binary.LittleEndian.Uint64(body)), int64(binary.LittleEndian.Uint64(body[8:]))
		}
		at += 5 + n
	}
	return off, size, m[0]
}

// TestPullContinuesAPartlyWrittenFile: a pull cancelled half way through
// its one large file keeps the verified prefix; the next pull fetches only
// the rest, says how much it reused, and the artifact verifies. A record
// whose state is another binding's (a sha256 state, as an earlier
// version wrote) makes the file be fetched again whole, never published
// wrong.
func TestPullContinuesAPartlyWrittenFile(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 24<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	var big artifact.FileEntry
	for _, fe := range l.Index.Files {
		if fe.Size > big.Size {
			big = fe
		}
	}
	total := l.Index.TotalBytes()
	for _, c := range []struct {
		name     string
		o        PullOptions
		badState bool
	}{
		{"stream", PullOptions{Ranges: RangesOff}, false},
		{"ranges", PullOptions{Ranges: RangesOn, ChunkSize: 1 << 20, Concurrency: 4}, false},
		{"a state of other bytes", PullOptions{Ranges: RangesOff}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := storetest.Open(t)
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var got atomic.Int64
			o := c.o
			o.Progress = func(n int64) {
				if got.Add(n) >= total/2 {
					cancel()
				}
			}
			_, _, err := Pull(cctx, d, remoteFor(t, f, "models/x:v1"), o)
			var ie *store.InterruptedError
			if !errors.As(err, &ie) || !errors.Is(err, context.Canceled) || ie.Kept < total/4 || ie.Total != total {
				t.Fatalf("cancelled pull: %v (%+v), want kept about half of %d", err, ie, total)
			}
			off, size, ck := lastCheckpoint(t, d, big.Path)
			if size != big.Size || off <= 0 || off >= size {
				t.Fatalf("checkpoint of %s at %d of %d", big.Path, off, size)
			}
			if c.badState {
				h := sha256.New()
				h.Write(make([]byte, off))
				st, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
				body := binary.LittleEndian.AppendUint64(nil, uint64(off))
				body = binary.LittleEndian.AppendUint64(body, uint64(size))
				body = binary.LittleEndian.AppendUint16(body, uint16(len(st)))
				body = append(append(body, st...), big.Path...)
				rec := append([]byte{'C'}, binary.LittleEndian.AppendUint32(nil, uint32(len(body)))...)
				fh, err := os.OpenFile(ck, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				fh.Write(append(rec, body...))
				fh.Close()
			}
			before := f.served.Load()
			o.Progress = nil
			pl, rep, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), o)
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close()
			served := f.served.Load() - before
			if c.badState {
				if rep.ResumedFiles != 0 || rep.Reused >= off || served < big.Size {
					t.Fatalf("report %+v, served %d: want %s fetched again whole", rep, served, big.Path)
				}
			} else if rep.ResumedFiles != 1 || rep.Reused < off || rep.Fetched+rep.Reused != total || served > total-off+1<<20 {
				t.Fatalf("report %+v, served %d: want %d of %s reused", rep, served, off, big.Path)
			}
			sameArtifact(t, d, pl, l)
			if m, _ := filepath.Glob(filepath.Join(d.Root(), "tmp", "*")); len(m) != 0 {
				t.Fatalf("temp builds left: %v", m)
			}
		})
	}
}
