package artifact

import (
	"context"
	"io"
	"time"
)

// Writer is the store-scoped writer a producer writes an artifact through.
// Files are invisible until the store publishes the whole artifact. The
// store's build is the implementation; every method is always there, and a
// producer uses those it needs: a writer with nothing kept answers Reuse
// with false, one that no process serves answers Seeding with false.
type Writer interface {
	// Create adds a payload file of exactly size bytes at a relative path,
	// hashed as it is written.
	Create(path string, size int64) (FileWriter, error)
	// CreateBound adds a payload file that takes part of its digests from
	// the record b binds to its bytes.
	//
	// A peer fetch, for example, creates each shard with
	// CreateBound(Binding{Want: senderEntry, By: BindTree}), writes every
	// tensor's bytes with WriteAt as they arrive on any rail, hashes each
	// tensor with BLAKE3 as it lands (or, after an RDMA read into the file,
	// from the landed bytes) and reports it with SetPartBLAKE3(i, sum); the
	// header region [0, DataStart) is written with WriteAt like any other
	// bytes. Close then checks the header against Want, derives the tree and
	// binds the sender's sha256; a disagreement is an *EntryMismatchError
	// naming the tensor.
	CreateBound(b Binding) (BoundFileWriter, error)
	// Reuse adopts a file kept from an interrupted build of the same
	// artifact at b.Want.Path if it holds exactly b.Want.Size bytes with
	// the sha256 b.Want.SHA256 (hex), as if it had been created with the
	// binding b, written and closed; it reports whether it did and, if so,
	// the file's hashes. The kept file is read once.
	Reuse(b Binding) (FileEntry, bool, error)
	// Seeder publishes the build's progress to other processes.
	Seeder
}

// FileWriter writes one payload file in order, hashed while it is written
// (BoundFileWriter has positioned writes). Close finishes the file; Entry
// then returns its hashes.
type FileWriter interface {
	io.Writer
	// WriteBuffer takes the file's next bytes in a buffer the caller owns
	// and hashes and writes them from it, without a copy. The writer calls
	// done exactly once, when it no longer reads b (at once if it refuses
	// b); until then b must not change.
	WriteBuffer(b []byte, done func()) error
	Close() error
	Entry() (FileEntry, error)
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
