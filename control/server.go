package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/unixserve"
)

// Server serves the control API.
type Server struct {
	hs  *http.Server
	lis net.Listener
}

// Listen creates the control socket at path (mode 0660; a stale socket is
// replaced) and starts serving svc on it.
func Listen(ctx context.Context, path string, svc Services) (*Server, error) {
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
				json.NewEncoder(w).Encode(failed(err))
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
		if err := decodeRequest(r, &req); err != nil {
			return nil, fmt.Errorf("mount request: %w", err)
		}
		return svc.Mounts.Mount(ctx, req)
	})
	handle("DELETE /v1/mounts", func(ctx context.Context, r *http.Request) (any, error) {
		return nil, svc.Mounts.Unmount(ctx, r.URL.Query().Get("dir"))
	})
	handle("GET /v1/mounts", func(context.Context, *http.Request) (any, error) {
		return svc.Mounts.List(), nil
	})
	handle("GET /v1/holders", func(_ context.Context, r *http.Request) (any, error) {
		id, err := artifact.ParseID(r.URL.Query().Get("identity"))
		if err != nil {
			return nil, err
		}
		h, err := svc.Mounts.HoldersOf(id)
		if err != nil {
			return nil, err
		}
		h.PID = os.Getpid()
		return h, nil
	})
	handle("GET /v1/prefetch", func(context.Context, *http.Request) (any, error) {
		if svc.Prefetch == nil {
			return []struct{}{}, nil
		}
		return svc.Prefetch(), nil
	})
	handle("POST /v1/publish", func(ctx context.Context, r *http.Request) (any, error) {
		if svc.Publish == nil {
			return nil, fmt.Errorf("publication: %w", errdefs.ErrNotImplemented)
		}
		var req PublishRequest
		if err := decodeRequest(r, &req); err != nil {
			return nil, fmt.Errorf("publish request: %w", err)
		}
		return svc.Publish(ctx, req)
	})
	handle("GET /v1/store", func(context.Context, *http.Request) (any, error) {
		if svc.Store == nil {
			return nil, fmt.Errorf("store: %w", errdefs.ErrNotImplemented)
		}
		return svc.Store(), nil
	})
	handle("GET /v1/use", func(ctx context.Context, _ *http.Request) (any, error) {
		if svc.Use == nil {
			return nil, fmt.Errorf("use: %w", errdefs.ErrNotImplemented)
		}
		return svc.Use(ctx)
	})
	handle("POST /v1/evict", func(ctx context.Context, r *http.Request) (any, error) {
		if svc.Evict == nil {
			return nil, fmt.Errorf("eviction: %w", errdefs.ErrNotImplemented)
		}
		var req EvictRequest
		if err := decodeRequest(r, &req); err != nil {
			return nil, fmt.Errorf("evict request: %w", err)
		}
		return svc.Evict(ctx, req)
	})
	c := &Server{hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, lis: lis}
	go func() {
		if err := c.hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			logger.WithError(err).Error("control API stopped")
		}
	}()
	return c, nil
}

// decodeRequest decodes a request's JSON body (at most 64 KiB, no unknown
// fields) into v; what does not decode is an invalid argument.
func decodeRequest(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if !errdefs.IsInvalidArgument(err) { // a malformed identity says its class already
			err = fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
		}
		return err
	}
	return nil
}

// Close stops serving and removes the socket.
func (c *Server) Close() error {
	return c.hs.Close() // closes the unix listener, which removes the socket
}
