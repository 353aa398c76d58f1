// Package unixserve serves the daemon's APIs on unix sockets: the socket
// itself (mode 0660, a stale one replaced, one another process serves
// refused) and a gRPC server on it whose calls log through the daemon's
// logger and whose errors cross the wire with their class once. The
// snapshots API, the CRI image service and the control API use it.
package unixserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Server serves a gRPC API on a unix socket.
type Server struct {
	srv  *grpc.Server
	lis  net.Listener
	path string
}

// ListenGRPC creates the socket at path (see Listen) and registers the
// services register registers on a gRPC server for it; Serve serves.
// Calls log through ctx's logger; at debug level each call logs its
// method and time, so a client's round trips can be counted.
func ListenGRPC(ctx context.Context, path string, register func(*grpc.Server)) (*Server, error) {
	lis, err := Listen(path)
	if err != nil {
		return nil, err
	}
	logger := log.G(ctx)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(c context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(log.WithLogger(c, logger), req)
		if logger.Logger.IsLevelEnabled(log.DebugLevel) {
			l := logger.WithField("method", info.FullMethod).WithField("seconds", time.Since(start).Seconds())
			if err != nil {
				l = l.WithError(err)
			}
			l.Debug("call served")
		}
		return resp, oneStatus(err)
	}))
	register(srv)
	return &Server{srv: srv, lis: lis, path: path}, nil
}

// oneStatus drops the details of a gRPC status error: containerd's
// conversion (errgrpc.ToGRPC) adds one for every error a chain joins, and
// clients print each on a line of its own ("permission denied" three
// times over in nerdctl's output), while the message already names the
// cause and its class once.
func oneStatus(err error) error {
	if st, ok := status.FromError(err); ok && len(st.Details()) > 0 {
		return status.Error(st.Code(), st.Message())
	}
	return err
}

// Serve serves until Stop.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop stops accepting calls, lets those in flight finish for up to grace,
// then cuts them, and removes the socket.
func (s *Server) Stop(ctx context.Context, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		log.G(ctx).Warn("calls still in flight after the grace period: cutting them")
		s.srv.Stop()
		<-done
	}
	os.Remove(s.path)
}

// Listen listens on a unix socket at path, mode 0660, making its
// directory (0711) if need be and replacing a stale socket; one another
// process serves is refused (errdefs.ErrFailedPrecondition).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is served by another process: %w", path, errdefs.ErrFailedPrecondition)
		}
		os.Remove(path)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}
