package snapshotter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/unixserve"
)

// The control API: host mounts and holders, HTTP/JSON on a unix socket
// (mode 0660), for the weightsnap CLI.
//
//	POST   /v1/mounts              HostMountRequest -> HostMountInfo
//	DELETE /v1/mounts?dir=DIR      -> 204
//	GET    /v1/mounts              -> []HostMountInfo
//	GET    /v1/holders?identity=ID -> Holders
//
// An error answers its errdefs class as the HTTP status (errhttp) and
// {"error": message}.

// ControlServer serves the control API.
type ControlServer struct {
	hs  *http.Server
	lis net.Listener
}

// ListenControl creates the control socket at path (mode 0660; a stale
// socket is replaced) and starts serving s on it.
func ListenControl(ctx context.Context, path string, s *Snapshotter) (*ControlServer, error) {
	lis, err := unixserve.Listen(path)
	if err != nil {
		return nil, err
	}
	logger := log.G(ctx)
	mux := http.NewServeMux()
	handle := func(pattern string, fn func(ctx context.Context, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			v, err := fn(log.WithLogger(r.Context(), logger), r)
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				w.WriteHeader(errhttp.ToHTTP(err))
				json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
				return
			}
			if v == nil {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			json.NewEncoder(w).Encode(v)
		})
	}
	handle("POST /v1/mounts", func(ctx context.Context, r *http.Request) (any, error) {
		var req HostMountRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			if !errdefs.IsInvalidArgument(err) { // a malformed identity says its class already
				err = fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
			}
			return nil, fmt.Errorf("mount request: %w", err)
		}
		return s.HostMount(ctx, req)
	})
	handle("DELETE /v1/mounts", func(ctx context.Context, r *http.Request) (any, error) {
		return nil, s.HostUnmount(ctx, r.URL.Query().Get("dir"))
	})
	handle("GET /v1/mounts", func(context.Context, *http.Request) (any, error) {
		return s.HostMounts(), nil
	})
	handle("GET /v1/holders", func(_ context.Context, r *http.Request) (any, error) {
		id, err := artifact.ParseID(r.URL.Query().Get("identity"))
		if err != nil {
			return nil, err
		}
		return s.HoldersOf(id)
	})
	c := &ControlServer{hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, lis: lis}
	go func() {
		if err := c.hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			logger.WithError(err).Error("control API stopped")
		}
	}()
	return c, nil
}

// Close stops serving and removes the socket.
func (c *ControlServer) Close() error {
	return c.hs.Close() // closes the unix listener, which removes the socket
}

// ControlClient calls a daemon's control API.
type ControlClient struct {
	path string
	hc   *http.Client
}

// NewControlClient is a client of the control socket at path.
func NewControlClient(path string) *ControlClient {
	return &ControlClient{path: path, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// HostMount asks the daemon for a host mount.
func (c *ControlClient) HostMount(ctx context.Context, req HostMountRequest) (*HostMountInfo, error) {
	var mi HostMountInfo
	return &mi, c.call(ctx, http.MethodPost, "/v1/mounts", req, &mi)
}

// HostUnmount asks the daemon to undo the host mount on dir.
func (c *ControlClient) HostUnmount(ctx context.Context, dir string) error {
	return c.call(ctx, http.MethodDelete, "/v1/mounts?dir="+url.QueryEscape(dir), nil, nil)
}

// Mounts lists the daemon's host mounts.
func (c *ControlClient) Mounts(ctx context.Context) ([]HostMountInfo, error) {
	var out []HostMountInfo
	return out, c.call(ctx, http.MethodGet, "/v1/mounts", nil, &out)
}

// Holders says what holds an artifact in the daemon.
func (c *ControlClient) Holders(ctx context.Context, id artifact.ID) (*Holders, error) {
	var h Holders
	return &h, c.call(ctx, http.MethodGet, "/v1/holders?identity="+url.QueryEscape(id.String()), nil, &h)
}

// call makes one request; a daemon that does not answer is
// errdefs.ErrUnavailable.
func (c *ControlClient) call(ctx context.Context, method, path string, in, out any) error {
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
