package artifact

import (
	"context"
	"io"
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
	// Reuse adopts a kept file if it holds exactly size bytes with the given
	// sha256 (hex), as if it had been created, written and closed; it reports
	// whether it did and, if so, the file's hashes.
	Reuse(path string, size int64, sha256 string) (FileEntry, bool, error)
}

// FileWriter writes one payload file. Write appends in order and is hashed
// while it writes; WriteAt places bytes anywhere (for fetchers that fill one
// file from several streams), and such a file is hashed by reading it back.
// Close finishes the file; Digest then returns its hashes.
type FileWriter interface {
	io.Writer
	io.WriterAt
	Close() error
	Digest() (FileEntry, error)
}

// MappedWriter is implemented by file writers that can hand out the file as
// a shared writable mapping, for fetchers whose transport writes into
// memory (one-sided RDMA reads). Bytes written through the mapping count as
// positioned writes; the mapping is valid until Close.
type MappedWriter interface {
	Map() ([]byte, error)
}

// Producer makes an artifact's payload files.
type Producer interface {
	// Name is the producer's name, as in ProducerRef.
	Name() string
	// Produce writes every payload file through w.
	Produce(ctx context.Context, w Writer) error
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
