package unixserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc"
)

// TestOneStatus: an error that crosses gRPC names its class once: the
// details containerd's conversion adds for each joined error are dropped.
func TestOneStatus(t *testing.T) {
	cause := fmt.Errorf("artifact x: reg.example is not in [resolve] registries: %w", errdefs.ErrPermissionDenied)
	joined := errors.Join(errdefs.ErrPermissionDenied, cause)
	err := oneStatus(errgrpc.ToGRPC(joined))
	native := errgrpc.ToNative(err)
	if !errdefs.IsPermissionDenied(native) || strings.Count(native.Error(), "permission denied") != 2 {
		t.Fatalf("%q", native) // the class, and the cause's own text: once each
	}
	if before := errgrpc.ToNative(errgrpc.ToGRPC(joined)).Error(); strings.Count(before, "permission denied") <= 2 {
		t.Fatalf("the conversion no longer repeats the class (%q): oneStatus can go", before)
	}
	if oneStatus(nil) != nil {
		t.Fatal("nil error")
	}
}

// TestListen: the socket is made with its directory, mode 0660; a stale
// socket (nobody answers) is replaced; one another listener serves is
// refused as a failed precondition and left in place.
func TestListen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sock    string // under the test's directory
		before  func(t *testing.T, path string)
		refused bool
	}{
		{name: "fresh", sock: "sub/api.sock", before: func(*testing.T, string) {}},
		{name: "stale", sock: "api.sock", before: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}},
		{name: "served", sock: "api.sock", refused: true, before: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.sock)
			tc.before(t, path)
			lis, err := Listen(path)
			if tc.refused {
				if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "served by another process") {
					t.Fatalf("want a refusal, got %v", err)
				}
				if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
					t.Fatalf("the served socket is gone: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
				t.Fatalf("mode %v, want a socket 0660", fi.Mode())
			}
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("the new socket does not answer: %v", err)
			}
			c.Close()
		})
	}
}

// TestServerStop: Serve returns nil once Stop is called, and Stop removes
// the socket.
func TestServerStop(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "grpc.sock")
	srv, err := ListenGRPC(ctx, path, func(*grpc.Server) {})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	srv.Stop(ctx, 0)
	if err := <-errc; err != nil {
		t.Fatalf("Serve after Stop: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is still there: %v", err)
	}
}
