package artifact

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// failWriter accepts limit bytes, then fails.
type failWriter struct {
	buf   bytes.Buffer
	limit int
	err   error
}

func (w *failWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.limit {
		return 0, w.err
	}
	return w.buf.Write(p)
}

// readerFromWriter adds io.ReaderFrom to a failWriter, as the store's writer has.
type readerFromWriter struct{ *failWriter }

func (w readerFromWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(w.failWriter, r)
}

// TestCopyToTellsSourceFromWriter: with and without io.ReaderFrom, CopyTo
// copies exactly n bytes, reports a short or failing source as a
// *SourceError, and passes the writer's failure through as it is.
func TestCopyToTellsSourceFromWriter(t *testing.T) {
	data := bytes.Repeat([]byte("weightsnap"), 300<<10) // 3 MiB: more than copyAhead's buffers
	full := errors.New("disk full")
	reset := errors.New("connection reset")
	for _, rf := range []bool{false, true} {
		for _, tc := range []struct {
			name      string
			src       io.Reader
			limit     int
			n         int64
			want      int64
			sourceErr error // the source failure CopyTo must report, or nil
			writerErr error
		}{
			{"exact", bytes.NewReader(data), len(data), int64(len(data)), int64(len(data)), nil, nil},
			{"longer source, n bytes taken", bytes.NewReader(data), len(data), 1 << 20, 1 << 20, nil, nil},
			{"short source", bytes.NewReader(data[:1000]), len(data), 2000, 1000, io.ErrUnexpectedEOF, nil},
			{"failing source", io.MultiReader(bytes.NewReader(data[:5000]), iotest.ErrReader(reset)), len(data), int64(len(data)), 5000, reset, nil},
			{"failing writer", bytes.NewReader(data), 1 << 20, int64(len(data)), -1, nil, full},
		} {
			t.Run(tc.name, func(t *testing.T) {
				fw := &failWriter{limit: tc.limit, err: full}
				var w io.Writer = fw
				if rf {
					w = readerFromWriter{fw}
				}
				var progress int64
				k, err := CopyTo(context.Background(), w, tc.src, tc.n, func(n int64) { progress += n })
				var se *SourceError
				switch {
				case tc.sourceErr != nil:
					if !errors.As(err, &se) || !errors.Is(err, tc.sourceErr) {
						t.Fatalf("ReaderFrom %v: err = %v, want a *SourceError of %v", rf, err, tc.sourceErr)
					}
				case tc.writerErr != nil:
					if errors.As(err, &se) || !errors.Is(err, tc.writerErr) {
						t.Fatalf("ReaderFrom %v: err = %v, want the writer's %v as it is", rf, err, tc.writerErr)
					}
					return
				case err != nil:
					t.Fatalf("ReaderFrom %v: %v", rf, err)
				}
				if k != tc.want || int64(fw.buf.Len()) != tc.want || !bytes.Equal(fw.buf.Bytes(), data[:k]) {
					t.Fatalf("ReaderFrom %v: copied %d (%d written), want %d", rf, k, fw.buf.Len(), tc.want)
				}
				if progress < k {
					t.Fatalf("ReaderFrom %v: progress %d < %d copied", rf, progress, k)
				}
			})
		}
	}
}

// TestCopyToStopsWhenCancelled: a cancelled context stops the copy as a
// source failure.
func TestCopyToStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, w := range []io.Writer{&failWriter{limit: 1 << 30}, readerFromWriter{&failWriter{limit: 1 << 30}}} {
		_, err := CopyTo(ctx, w, bytes.NewReader(make([]byte, 1<<20)), 1<<20, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%T: err = %v, want context.Canceled", w, err)
		}
	}
}
