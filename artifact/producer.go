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
	// Reserver makes room for the whole artifact before any payload.
	Reserver
	// PartResumer continues a file an interrupted build wrote in part, in
	// order; TreeResumer one bound by its tensor tree.
	PartResumer
	TreeResumer
	// Seeder publishes the build's progress to other processes.
	Seeder
}

// PartResumer is the part of a Writer that continues a file an
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

// TreeResumer is the part of a Writer that continues a file bound by its
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
