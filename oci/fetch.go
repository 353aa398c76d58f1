package oci

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// blobURL is the URL of a blob in the remote's repository.
func (r *Remote) blobURL(d digest.Digest) string {
	scheme := "https"
	if r.plainHTTP {
		scheme = "http"
	}
	return fmt.Sprintf("%s://%s/v2/%s/blobs/%s", scheme, r.Ref.Host(), r.Ref.Repository, d)
}

// getBlob GETs a blob through the authenticating client: the whole blob
// when n < 0, else the range [off, off+n) (it then insists on a 206 answer
// for exactly that range).
func (r *Remote) getBlob(ctx context.Context, desc ocispec.Descriptor, off, n int64) (io.ReadCloser, error) {
	resp, err := r.blobResponse(ctx, desc, off, n)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// blobResponse is getBlob's answer, whole.
func (r *Remote) blobResponse(ctx context.Context, desc ocispec.Descriptor, off, n int64) (*http.Response, error) {
	ctx = auth.AppendRepositoryScope(ctx, r.Ref, auth.ActionPull)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.blobURL(desc.Digest), nil)
	if err != nil {
		return nil, err
	}
	if n >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case n < 0 && resp.StatusCode == http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != desc.Size {
			resp.Body.Close()
			return nil, &RangeError{Digest: desc.Digest.String(), Reason: fmt.Sprintf("Content-Length %d, descriptor says %d", resp.ContentLength, desc.Size)}
		}
		return resp, nil
	case n >= 0 && resp.StatusCode == http.StatusPartialContent:
		s, e, _, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || s != off || e != off+n-1 {
			resp.Body.Close()
			return nil, &RangeError{Digest: desc.Digest.String(), Reason: fmt.Sprintf("asked bytes %d-%d, got Content-Range %q", off, off+n-1, resp.Header.Get("Content-Range"))}
		}
		return resp, nil
	case n >= 0 && resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return nil, &RangeError{Digest: desc.Digest.String(), Reason: "the registry ignored the Range header"}
	}
	defer resp.Body.Close()
	return nil, classifyRemote(parseErrorResponse(resp))
}

// parseErrorResponse turns a failed registry response into an error.
func parseErrorResponse(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	er := &errcode.ErrorResponse{Method: resp.Request.Method, URL: resp.Request.URL, StatusCode: resp.StatusCode}
	var doc struct {
		Errors errcode.Errors `json:"errors"`
	}
	if json.Unmarshal(body, &doc) == nil {
		er.Errors = doc.Errors
	}
	return er
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*").
func parseContentRange(h string) (start, end, total int64, ok bool) {
	rest, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	span, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2 error
	start, err1 = strconv.ParseInt(a, 10, 64)
	end, err2 = strconv.ParseInt(b, 10, 64)
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		total = t
	}
	return start, end, total, err1 == nil && err2 == nil && end >= start
}

// rangeProbe is what a one-byte ranged GET of a blob told about the
// registry (probeRanges).
type rangeProbe struct {
	served     bool          // a 206 with exactly that range
	rtt        time.Duration // the round trip to the host that served it (TCP's least), 0 if unknown
	redirected bool          // served by another host (object storage, a CDN)
}

// probeRanges GETs the first byte of a blob: whether the registry serves
// ranges, how far away the server is, and whether it sends the bytes from
// elsewhere.
func (r *Remote) probeRanges(ctx context.Context, desc ocispec.Descriptor) rangeProbe {
	if desc.Size < 2 {
		return rangeProbe{}
	}
	var conn net.Conn // of the last request: a redirect's target
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn }})
	resp, err := r.blobResponse(ctx, desc, 0, 1)
	if err != nil {
		log.G(ctx).WithError(err).Debug("registry does not serve ranges; fetching blobs as single streams")
		return rangeProbe{}
	}
	defer resp.Body.Close()
	return rangeProbe{served: true, rtt: tcpRTT(conn), redirected: resp.Request.URL.Host != r.Ref.Host()}
}

// tcpRTT is the least round-trip time the kernel measured on a TCP
// connection (under TLS or not), 0 if it has none.
func tcpRTT(c net.Conn) time.Duration {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	if err := raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || info == nil {
		return 0
	}
	return time.Duration(cmp.Or(info.Min_rtt, info.Rtt)) * time.Microsecond
}

// transient reports whether a fetch error is worth retrying from where it stopped.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || err == nil {
		return false
	}
	var re *RangeError
	var de *DigestMismatchError
	var er *errcode.ErrorResponse
	switch {
	case errors.As(err, &de):
		return false
	case errors.As(err, &re):
		return true
	case errors.As(err, &er):
		return er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests || er.StatusCode == http.StatusUnauthorized
	}
	return true // network errors: reset, unexpected EOF, timeouts
}

// retryDelay is the pause before attempt n (1-based) of a failed transfer.
func retryDelay(n int) time.Duration { return time.Duration(n*n) * 250 * time.Millisecond }

// fetchAttempts bounds how often one blob range is re-requested.
const fetchAttempts = 4
