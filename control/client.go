package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/weightsnap/weightsnap/artifact"
)

// Client calls a daemon's control API.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient is a client of the control socket at path.
func NewClient(path string) *Client {
	return &Client{path: path, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// HostMount asks the daemon for a host mount.
func (c *Client) HostMount(ctx context.Context, req HostMountRequest) (*HostMountInfo, error) {
	var mi HostMountInfo
	return &mi, c.call(ctx, http.MethodPost, "/v1/mounts", req, &mi)
}

// HostUnmount asks the daemon to undo the host mount on dir.
func (c *Client) HostUnmount(ctx context.Context, dir string) error {
	return c.call(ctx, http.MethodDelete, "/v1/mounts?dir="+url.QueryEscape(dir), nil, nil)
}

// Mounts lists the daemon's host mounts.
func (c *Client) Mounts(ctx context.Context) ([]HostMountInfo, error) {
	var out []HostMountInfo
	return out, c.call(ctx, http.MethodGet, "/v1/mounts", nil, &out)
}

// Prefetch decodes the daemon's prefetch entries' states into out, a
// *[]prefetch.Status.
func (c *Client) Prefetch(ctx context.Context, out any) error {
	return c.call(ctx, http.MethodGet, "/v1/prefetch", nil, out)
}

// Store says which store the daemon serves.
func (c *Client) Store(ctx context.Context) (*StoreInfo, error) {
	var si StoreInfo
	return &si, c.call(ctx, http.MethodGet, "/v1/store", nil, &si)
}

// Use decodes the daemon's store as its eviction policy sees it into out,
// a *[]*store.ArtifactInfo.
func (c *Client) Use(ctx context.Context, out any) error {
	return c.call(ctx, http.MethodGet, "/v1/use", nil, out)
}

// Evict asks the daemon to evict now, or what it would evict, and decodes
// its report into out, an *evict.Report.
func (c *Client) Evict(ctx context.Context, req EvictRequest, out any) error {
	return c.call(ctx, http.MethodPost, "/v1/evict", req, out)
}

// Holders says what holds an artifact in the daemon.
func (c *Client) Holders(ctx context.Context, identity artifact.ID) (*Holders, error) {
	var h Holders
	return &h, c.call(ctx, http.MethodGet, "/v1/holders?identity="+url.QueryEscape(identity.String()), nil, &h)
}

// call makes one request; a daemon that does not answer is
// errdefs.ErrUnavailable.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://weightsnapd"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("weightsnapd does not answer on its control socket %s ([snapshotter] control_address of the configuration file, which --config or WEIGHTSNAP_CONFIG names; or --control-address): is it running? (%v): %w",
			c.path, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		// The daemon's message names its class already when it wraps one.
		cls := errhttp.ToNative(resp.StatusCode)
		if msg := strings.TrimSuffix(e.Error, ": "+cls.Error()); msg != cls.Error() {
			return fmt.Errorf("weightsnapd: %s: %w", msg, cls)
		}
		return fmt.Errorf("weightsnapd: %w", cls)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return json.Unmarshal(raw, out)
}
