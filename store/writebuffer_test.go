package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// lentBuffers writes every source file through the store writer's
// WriteBuffer, in pieces of the given sizes, each in a buffer of its own
// that done overwrites: a writer still reading a buffer after its done
// would hash or write the overwritten bytes. It counts the buffers lent
// and the calls of done.
type lentBuffers struct {
	src         *artifact.SourceDir
	sizes       []int
	lent, given atomic.Int64
}

func (p *lentBuffers) producer() artifact.Producer {
	return artifact.ProducerFunc{ProducerName: "lent", Fn: func(ctx context.Context, w artifact.Writer) error {
		for _, sf := range p.src.Files {
			data, err := os.ReadFile(filepath.Join(p.src.Root, sf.Path))
			if err != nil {
				return err
			}
			fw, err := w.Create(sf.Path, sf.Size)
			if err != nil {
				return err
			}
			bw, ok := fw.(artifact.BufferWriter)
			if !ok {
				fw.Close()
				return errors.New("the store's file writer takes no buffers")
			}
			for i := 0; len(data) > 0; i++ {
				b := make([]byte, min(len(data), p.sizes[i%len(p.sizes)]))
				data = data[copy(b, data):]
				p.lent.Add(1)
				if err := bw.WriteBuffer(b, func() { p.given.Add(1); clear(b) }); err != nil {
					fw.Close()
					return err
				}
			}
			if err := fw.Close(); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestWriteBufferEqualsHashFile: files written from lent buffers publish
// exactly the entries the hasher computes for the same files, and every
// buffer is given back once, after the writer is through with it.
func TestWriteBufferEqualsHashFile(t *testing.T) {
	_, src := storetest.Checkpoint(t, 6<<20, 3)
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"ranges", []int{8 << 20}},
		{"odd pieces", []int{1, 7, 4093, 1 << 20, 3 << 20, 65537}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &lentBuffers{src: src, sizes: tc.sizes}
			buildEqualsHashed(t, src, p.producer())
			if lent, given := p.lent.Load(), p.given.Load(); lent == 0 || given != lent {
				t.Fatalf("%d buffers lent, %d given back", lent, given)
			}
		})
	}
}

// TestWriteBufferRefusals: a buffer past the declared size, or after
// Close, is refused and given back at once.
func TestWriteBufferRefusals(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	id := storetest.Identity(src)
	sf := src.Files[0]
	for _, tc := range []struct {
		name  string
		write func(fw artifact.FileWriter, bw artifact.BufferWriter, done func()) error
		want  error
	}{
		{"past the size", func(_ artifact.FileWriter, bw artifact.BufferWriter, done func()) error {
			return bw.WriteBuffer(make([]byte, sf.Size+1), done)
		}, errdefs.ErrOutOfRange},
		{"after close", func(fw artifact.FileWriter, bw artifact.BufferWriter, done func()) error {
			fw.Close()
			return bw.WriteBuffer(make([]byte, 1), done)
		}, os.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var given int
			var err error
			d := storetest.Open(t)
			_, _, _ = d.GetOrBuild(context.Background(), id, artifact.ProducerFunc{ProducerName: "refused", Fn: func(ctx context.Context, w artifact.Writer) error {
				fw, cerr := w.Create(sf.Path, sf.Size)
				if cerr != nil {
					return cerr
				}
				err = tc.write(fw, fw.(artifact.BufferWriter), func() { given++ })
				fw.Close()
				return err
			}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if given != 1 {
				t.Fatalf("the refused buffer was given back %d times, want once", given)
			}
		})
	}
}
