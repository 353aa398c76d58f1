package artifact

import (
	"context"
	"io"
	"time"
)

// Writer is the store-scoped writer a producer writes an artifact through.
// Files are invisible until the store publishes the whole artifact.
type Writer interface {
	// Create adds a payload file of exactly size bytes at a relative path.
	Create(path string, size int64) (FileWriter, error)
}

// Resumer is implemented by writers that may hold the files of an
// interrupted build of the same artifact.
type Resumer interface {
	// Reuse adopts a kept file at b.Want.Path if it holds exactly
	// b.Want.Size bytes with the sha256 b.Want.SHA256 (hex), as if it had
	// been created with the binding b, written and closed; it reports whether
	// it did and, if so, the file's hashes. The kept file is read once.
	Reuse(b Binding) (FileEntry, bool, error)
}

// PartResumer is implemented by writers that may hold a file an
// interrupted build of the same artifact wrote in part, in order, with a
// record of the verified prefix it wrote and synced.
type PartResumer interface {
	// Continue adopts the kept prefix of the file at b.Want.Path, as if it
	// had been created with the binding b and its first off bytes written:
	// the producer writes the rest, from off. ok is false (and nothing is
	// created) when there is no such prefix. Only the prefix's sha256 is
	// taken from the record, and Close still checks it: a file that then
	// fails its sha256 was not proved wrong by its source, and the
	// producer may Drop it and write it again from the start.
	Continue(b Binding) (w FileWriter, off int64, ok bool, err error)
	// Drop discards a file created or continued by this writer and not
	// published, so that it can be created again.
	Drop(path string) error
}

// TreeResumer is implemented by writers that may hold a file bound by its
// tensor tree (BindTree) that an interrupted build wrote in part, in any
// order, with no record of what it wrote: the producer checks each of its
// units against the record's BLAKE3 and reports those that match.
type TreeResumer interface {
	// ContinueBound adopts the kept file at b.Want.Path, as if it had been
	// created with CreateBound(b) and its bytes written, and gives a reader
	// of them, valid until the writer is closed. The producer reports the
	// parts whose kept bytes hash to the record (SetPartBLAKE3) and writes
	// the others; none is taken on trust. ok is false (and nothing is
	// created) when no such file was kept.
	ContinueBound(b Binding) (w BoundFileWriter, r io.ReaderAt, ok bool, err error)
}

// FileWriter writes one payload file in order, hashed while it is written
// (BoundWriter has positioned writes). Close finishes the file; Entry then
// returns its hashes.
type FileWriter interface {
	io.Writer
	Close() error
	Entry() (FileEntry, error)
}

// BufferWriter is implemented by FileWriters (the store's) that take a
// file's next bytes in a buffer the caller owns and hash and write them
// from it, without a copy. The writer calls done exactly once, when it no
// longer reads b (at once if it refuses b); until then b must not change.
type BufferWriter interface {
	WriteBuffer(b []byte, done func()) error
}

// Producer makes an artifact's payload files.
type Producer interface {
	// Name is the producer's name, as in ProducerRef.
	Name() string
	// Produce writes every payload file through w.
	Produce(ctx context.Context, w Writer) error
}

// ProgressReporter is a producer that says, while it runs, how far it is:
// the payload bytes done (read from its source, fetched or reused) and the
// bytes it will have done in all (0 when it cannot say). Safe to call from
// another goroutine at any time.
type ProgressReporter interface {
	Progress() (done, total int64)
}

// Follow calls fn with p's progress every interval, from a goroutine of its
// own, until the stop it returns is called; stop calls fn once more, so the
// last call sees where p stopped, and returns after it.
func Follow(p ProgressReporter, every time.Duration, fn func(done, total int64)) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fn(p.Progress())
				return
			case <-t.C:
				fn(p.Progress())
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// ProducerFunc adapts a function to a Producer.
type ProducerFunc struct {
	ProducerName string
	Fn           func(ctx context.Context, w Writer) error
}

// Name implements Producer.
func (p ProducerFunc) Name() string { return p.ProducerName }

// Produce implements Producer.
func (p ProducerFunc) Produce(ctx context.Context, w Writer) error { return p.Fn(ctx, w) }
