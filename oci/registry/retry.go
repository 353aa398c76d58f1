package registry

import (
	"context"
	"io"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/containerd/log"
)

// Registry requests are retried in one layer, the HTTP client's transport
// (oras's retry transport, newHTTPClient): a request that got no answer,
// or a 408, 429 or 5xx, is sent again there and nowhere else. What the
// transport cannot see is a body that breaks after its response arrived;
// Resume requests the rest of such a body.

// resumeTries bounds how often one blob body is requested, the first time
// included.
const resumeTries = 4

// Resume reads a blob body with read, requesting the rest of it again with
// open when the body broke part-way: open asks for what is still missing
// (its caller keeps the offset) and read consumes the body, saying whether
// its error is the body's own (a reset, an unexpected EOF), which is
// resumed after an exponential backoff, or another (the store's writer
// failed), which ends the read. A failed request is not made again here:
// the transport retried it. what names the blob in the log.
func Resume(ctx context.Context, what string, open func() (io.ReadCloser, error), read func(io.Reader) (broke bool, err error)) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 250 * time.Millisecond
	b.Multiplier = 2
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		rc, err := open()
		if err != nil {
			return struct{}{}, backoff.Permanent(err)
		}
		defer rc.Close()
		broke, err := read(rc)
		if err != nil && !broke {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxTries(resumeTries), backoff.WithNotify(func(err error, d time.Duration) {
		log.G(ctx).WithError(err).WithField("blob", what).WithField("retry_in", d).Warn("blob body broke; resuming")
	}))
	return err
}
