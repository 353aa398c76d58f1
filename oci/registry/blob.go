package registry

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

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// blobURL is the URL of a blob in the repository at this host.
func (h *host) blobURL(d digest.Digest) string {
	scheme := "https"
	if h.plainHTTP {
		scheme = "http"
	}
	return fmt.Sprintf("%s://%s/v2/%s/blobs/%s", scheme, h.ref.Host(), h.ref.Repository, d)
}

// GetBlob GETs a blob through the authenticating client: the whole blob
// when n < 0, else the range [off, off+n) (it then insists on a 206 answer
// for exactly that range).
func (r *Remote) GetBlob(ctx context.Context, desc ocispec.Descriptor, off, n int64) (io.ReadCloser, error) {
	var resp *http.Response
	err := r.try(ctx, docker.HostCapabilityPull, desc.Digest, func(h *host) (err error) {
		resp, err = h.blobResponse(ctx, desc, off, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// blobResponse is GetBlob's answer from this host, whole.
func (h *host) blobResponse(ctx context.Context, desc ocispec.Descriptor, off, n int64) (*http.Response, error) {
	ctx = auth.AppendRepositoryScope(ctx, h.ref, auth.ActionPull)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.blobURL(desc.Digest), nil)
	if err != nil {
		return nil, err
	}
	if n >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case n < 0 && resp.StatusCode == http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != desc.Size {
			resp.Body.Close()
			return nil, rangeError(desc, fmt.Errorf("Content-Length %d, descriptor says %d", resp.ContentLength, desc.Size))
		}
		return resp, nil
	case n >= 0 && resp.StatusCode == http.StatusPartialContent:
		s, e, _, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || s != off || e != off+n-1 {
			resp.Body.Close()
			return nil, rangeError(desc, fmt.Errorf("asked bytes %d-%d, got Content-Range %q", off, off+n-1, resp.Header.Get("Content-Range")))
		}
		return resp, nil
	case n >= 0 && resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return nil, rangeError(desc, errRangeIgnored)
	}
	defer resp.Body.Close()
	return nil, Classify(parseErrorResponse(resp))
}

// errRangeIgnored is a host that answered a ranged GET with the whole blob.
var errRangeIgnored = errors.New("the registry ignored the Range header")

// rangeError is a registry that answered a blob request wrongly: it
// misbehaved, and may not the next time.
func rangeError(desc ocispec.Descriptor, reason error) error {
	return fmt.Errorf("fetch of %s: %w: %w", desc.Digest, reason, errdefs.ErrUnavailable)
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

// RangeProbe is what a one-byte ranged GET of a blob told about the
// registry (ProbeRanges).
type RangeProbe struct {
	Served     bool          // a 206 with exactly that range
	RTT        time.Duration // the round trip to the host that served it (TCP's least), 0 if unknown
	Redirected bool          // served by another host (object storage, a CDN)
}

// ProbeRanges GETs the first byte of a blob: whether the registry serves
// ranges, how far away the server is, and whether it sends the bytes from
// elsewhere.
func (r *Remote) ProbeRanges(ctx context.Context, desc ocispec.Descriptor) RangeProbe {
	if desc.Size < 2 {
		return RangeProbe{}
	}
	var conn net.Conn // of the last request: a redirect's target
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn }})
	var probe RangeProbe
	// The first host that has the blob answers, with its range or without
	// (a pull-through cache that does not hold it yet sends it whole).
	err := r.try(ctx, docker.HostCapabilityPull, desc.Digest, func(h *host) error {
		resp, err := h.blobResponse(ctx, desc, 0, 1)
		if errors.Is(err, errRangeIgnored) {
			log.G(ctx).WithError(err).WithField("host", h.host).Debug("registry does not serve ranges; fetching blobs as single streams")
			return nil
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		probe = RangeProbe{Served: true, RTT: tcpRTT(conn), Redirected: resp.Request.URL.Host != h.ref.Host()}
		return nil
	})
	if err != nil {
		log.G(ctx).WithError(err).Debug("registry does not serve ranges; fetching blobs as single streams")
	}
	return probe
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
