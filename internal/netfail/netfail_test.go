package netfail_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/netfail"
	"github.com/weightsnap/weightsnap/internal/testenv"
)

// TestClassify: real failures of the standard library, each in the class
// it belongs to.
func TestClassify(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	for _, tc := range []struct {
		name             string
		err              func(t *testing.T) error
		unreachable, tls bool
	}{
		{"connection refused", func(t *testing.T) error {
			_, err := net.Dial("tcp", testenv.ClosedAddr(t))
			return err
		}, true, false},
		{"read timeout", func(t *testing.T) error {
			c, err := net.Dial("tcp", testenv.BlackHole(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err = c.Read(make([]byte, 1))
			return fmt.Errorf("model request status: %w", err)
		}, true, false},
		{"dial context deadline", func(t *testing.T) error {
			ctx, cancel := context.WithTimeout(context.Background(), 0)
			defer cancel()
			_, err := (&net.Dialer{}).DialContext(ctx, "tcp", testenv.BlackHole(t))
			return err
		}, true, false},
		{"HTTP request refused", func(t *testing.T) error {
			_, err := http.Get("http://" + testenv.ClosedAddr(t) + "/v2/")
			return err
		}, true, false},
		{"DNS failure", func(*testing.T) error {
			return &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "registry.invalid", IsNotFound: true}}
		}, true, false},
		{"hung up", func(*testing.T) error { return fmt.Errorf("read manifest: %w", io.ErrUnexpectedEOF) }, true, false},
		{"TLS unknown authority", func(*testing.T) error {
			_, err := http.Get(tlsSrv.URL)
			return err
		}, false, true},
		{"TLS to a plain HTTP server", func(*testing.T) error {
			c, err := tls.Dial("tcp", plain.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // the handshake is what is tested
			if err == nil {
				c.Close()
			}
			return err
		}, false, true},
		{"an answer", func(*testing.T) error { return fmt.Errorf("manifest unknown: %w", errdefs.ErrNotFound) }, false, false},
		{"a local failure", func(*testing.T) error { return &os.PathError{Op: "open", Path: "/x", Err: os.ErrPermission} }, false, false},
		{"nil", func(*testing.T) error { return nil }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(t)
			if tc.name != "nil" && err == nil {
				t.Fatal("no error")
			}
			if got := netfail.Unreachable(err); got != tc.unreachable {
				t.Errorf("Unreachable = %v, want %v: %v", got, tc.unreachable, err)
			}
			if got := netfail.TLS(err); got != tc.tls {
				t.Errorf("TLS = %v, want %v: %v", got, tc.tls, err)
			}
			if errors.Is(err, context.Canceled) {
				t.Errorf("a cancelled context is not a network failure: %v", err)
			}
		})
	}
}
