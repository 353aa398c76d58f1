package oci

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
)

// stream fetches a whole blob as one stream, written in order so the store
// hashes it while it writes. If the stream breaks, it continues from where
// it stopped with a ranged request (registries that serve no ranges fail).
func (p *puller) stream(ctx context.Context, t *fileTask) error {
	size := t.f.Size
	var pos int64
	for attempt := 1; ; attempt++ {
		n := int64(-1)
		if pos > 0 {
			n = size - pos
		}
		rc, err := p.r.getBlob(ctx, t.f.Layer, pos, n)
		if err == nil {
			var k int64
			k, err = artifact.CopyAhead(ctx, rc, size-pos, func(b []byte) error {
				if err := t.write(b); err != nil {
					return err
				}
				p.fetched.Add(int64(len(b)))
				p.progress(int64(len(b)))
				return nil
			})
			rc.Close()
			pos += k
			if err == nil {
				return nil
			}
		}
		if !retryable(ctx, err) || attempt >= fetchAttempts {
			return err
		}
		log.G(ctx).WithError(err).WithField("file", t.f.Path).WithField("offset", pos).Warn("blob stream broke; resuming")
		if err := sleep(ctx, retryDelay(attempt)); err != nil {
			return err
		}
	}
}

// fetchRange fetches [off, off+len(buf)) of a blob into buf, re-requesting
// what is missing after a transient failure.
func (p *puller) fetchRange(ctx context.Context, t *fileTask, off int64, buf []byte) error {
	n := int64(len(buf))
	var done int64
	for attempt := 1; ; attempt++ {
		rc, err := p.r.getBlob(ctx, t.f.Layer, off+done, n-done)
		if err == nil {
			var k int
			k, err = io.ReadFull(rc, buf[done:])
			rc.Close()
			done += int64(k)
			p.fetched.Add(int64(k))
			p.progress(int64(k))
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
		}
		if err == nil {
			return nil
		}
		if !retryable(ctx, err) || attempt >= fetchAttempts {
			return err
		}
		log.G(ctx).WithError(err).WithField("file", t.f.Path).WithField("offset", off+done).Warn("ranged fetch broke; resuming")
		if err := sleep(ctx, retryDelay(attempt)); err != nil {
			return err
		}
	}
}

// writeError is a failure of the store's writer: never retried.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func retryable(ctx context.Context, err error) bool {
	var we *writeError
	if errors.As(err, &we) {
		return false
	}
	return transient(ctx, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// diagnose tells a corrupted blob from a malformed file: the store's hasher
// rejects bad safetensors bytes before the blob's sha256 is known, so when
// it does, the blob is fetched once more through sha256 alone. A digest
// that does not match the descriptor makes the failure a
// *DigestMismatchError (the registry or the path corrupted it); a matching
// one leaves the format error (the file itself is malformed).
func (p *puller) diagnose(ctx context.Context, f PlanFile, err error) error {
	var fe *artifact.FormatError
	if !errors.As(err, &fe) || ctx.Err() != nil {
		return err
	}
	rc, gerr := p.r.getBlob(ctx, f.Layer, 0, -1)
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
		return &DigestMismatchError{What: f.Path, Want: f.Layer.Digest.String(), Got: got}
	}
	return err
}
