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
