package oci

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"golang.org/x/sync/errgroup"
)

// stream fetches a whole blob as one stream, written in order so the store
// hashes it while it writes. If the stream breaks, it continues from where
// it stopped with a ranged request (registries that serve no ranges fail).
func (p *puller) stream(ctx context.Context, t *fileTask) error {
	size := t.f.Size
	pos := t.from
	return registry.Resume(ctx, t.f.Path, func() (io.ReadCloser, error) {
		n := int64(-1)
		if pos > 0 {
			n = size - pos
		}
		return p.r.GetBlob(ctx, t.f.Layer, pos, n)
	}, func(rc io.Reader) (bool, error) {
		k, err := p.copyBlob(ctx, t, rc, size-pos)
		pos += k
		var se *artifact.SourceError
		return errors.As(err, &se), err
	})
}

// copyBlob copies the next n bytes of a blob stream into the file, which
// it creates in the store once the stream's first byte has arrived. The
// store reads them from the stream straight into its own buffers. A failed
// read of the stream is an *artifact.SourceError.
func (p *puller) copyBlob(ctx context.Context, t *fileTask, rc io.Reader, n int64) (int64, error) {
	br := bufio.NewReaderSize(rc, 4096) // holds the first bytes until the file exists
	if t.fw == nil {
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, &artifact.SourceError{Err: err}
		}
		if err := t.create(); err != nil {
			return 0, err
		}
	}
	if p.pieces != nil {
		return p.copyPieces(ctx, t, br, t.f.Size-n, n)
	}
	return artifact.CopyTo(ctx, t.fw, br, n, p.progressFetched)
}

// fetchRange fetches [off, off+len(buf)) of a blob into buf, requesting
// what is missing again after the body broke.
func (p *puller) fetchRange(ctx context.Context, t *fileTask, off int64, buf []byte) error {
	n := int64(len(buf))
	var done int64
	return registry.Resume(ctx, t.f.Path, func() (io.ReadCloser, error) {
		return p.r.GetBlob(ctx, t.f.Layer, off+done, n-done)
	}, func(rc io.Reader) (bool, error) {
		k, err := io.ReadFull(rc, buf[done:])
		done += int64(k)
		p.fetched.Add(int64(k))
		p.progress(int64(k))
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err != nil, err
	})
}

// diagnose tells a corrupted blob from a malformed file: the store's hasher
// rejects bad safetensors bytes before the blob's sha256 is known, so when
// it does, the blob is fetched once more through sha256 alone. A digest
// that does not match the descriptor makes the failure a
// digest mismatch, errdefs.ErrDataLoss (the registry or the path corrupted it); a matching
// one leaves the format error (the file itself is malformed).
func (p *puller) diagnose(ctx context.Context, f PlanFile, err error) error {
	var fe *artifact.FormatError
	if !errors.As(err, &fe) || ctx.Err() != nil {
		return err
	}
	rc, gerr := p.r.GetBlob(ctx, f.Layer, 0, -1)
	if gerr != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, cerr := io.Copy(h, io.LimitReader(rc, f.Size+1))
	if cerr != nil {
		return err
	}
	got := fmt.Sprintf("sha256:%x", h.Sum(nil))
	if n != f.Size || got != f.Layer.Digest.String() {
		return registry.DigestMismatch(f.Path, f.Layer.Digest.String(), got)
	}
	return err
}

// unpackAll fetches and extracts the plan's tar layers, a few at a time
// (each is decompressed and extracted on one core), and checks that the
// artifact holds a safetensors file when no raw layer is one.
func (p *puller) unpackAll(ctx context.Context, w artifact.Writer) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.filesInFlight())
	var safetensors atomic.Int64
	for _, f := range p.plan.Files {
		if artifact.IsSafetensors(f.Path) {
			safetensors.Add(1)
		}
	}
	for _, a := range p.plan.Archives {
		g.Go(func() error {
			files, err := p.unpack(gctx, w, a)
			if err != nil {
				return fmt.Errorf("fetch %s (%s): %w", a.Path, a.Layer.Digest, err)
			}
			for _, f := range files {
				if artifact.IsSafetensors(f.Path) {
					safetensors.Add(1)
				}
			}
			log.G(ctx).WithField("layer", a.Layer.Digest).WithField("files", len(files)).Debug("tar layer extracted")
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if safetensors.Load() == 0 {
		return unsupported(p.plan.Ref, "no .safetensors file in its layers")
	}
	return nil
}

// errUnpackDone stops a tar layer's fetch once its extraction has ended.
var errUnpackDone = errors.New("tar layer extraction ended")

// unpack streams one tar layer from the registry into its extraction
// (extractLayer), which hashes it as it reads; a body that breaks is
// requested again from where it stopped, as a file's stream is. A failed
// fetch is reported before what the extraction made of its end.
func (p *puller) unpack(ctx context.Context, w artifact.Writer, a PlanArchive) ([]artifact.File, error) {
	pr, pw := io.Pipe()
	fetched := make(chan error, 1)
	go func() {
		size := a.Layer.Size
		var pos int64
		err := registry.Resume(ctx, a.Path, func() (io.ReadCloser, error) {
			n := int64(-1)
			if pos > 0 {
				n = size - pos
			}
			return p.r.GetBlob(ctx, a.Layer, pos, n)
		}, func(rc io.Reader) (bool, error) {
			k, err := artifact.CopyTo(ctx, pw, rc, size-pos, func(k int64) {
				p.fetched.Add(k)
				p.progress(k)
			})
			pos += k
			var se *artifact.SourceError
			return errors.As(err, &se), err
		})
		pw.CloseWithError(err)
		fetched <- err
	}()
	files, err := extractLayer(ctx, pr, a, w, limitsFor(a))
	pr.CloseWithError(errUnpackDone)
	if ferr := <-fetched; ferr != nil && !errors.Is(ferr, errUnpackDone) {
		return nil, ferr
	}
	return files, err
}
