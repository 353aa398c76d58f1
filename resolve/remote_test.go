package resolve

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/store"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// busy is a weight peer's busy answer, as its wire error reads.
type busy struct{}

func (busy) Error() string   { return "peer: busy: 64 sessions, the most this peer serves at once" }
func (busy) Unwrap() error   { return errdefs.ErrUnavailable }
func (busy) Retryable() bool { return true }

func status(code int) error {
	return registry.Classify(&errcode.ErrorResponse{Method: http.MethodGet, StatusCode: code})
}

// TestClassifyRemote is the remote failure table (classifyRemote) row by
// row, with failures as the peer client and the registry client return
// them, and where the mode then takes resolution.
func TestClassifyRemote(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	_, refused := net.Dial("tcp", dead)
	if refused == nil {
		t.Fatalf("%s answered", dead)
	}
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	_, untrusted := http.Get(tlsSrv.URL)
	if untrusted == nil {
		t.Fatal("an unknown CA was trusted")
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "registry.invalid", IsNotFound: true}}
	notFound := fmt.Errorf("peer %s: no READY artifact here: %w", dead, errdefs.ErrNotFound)
	unauthorized := fmt.Errorf("peer %s: peer: token refused: %w", dead, errdefs.ErrPermissionDenied)

	type want struct {
		kind      Kind
		retry     bool
		preferred Rule
		required  Rule
	}
	var (
		unreachable = want{KindUnreachable, true, nextThenCanonical, nextThenFail}
		miss        = want{KindMiss, false, nextThenCanonical, nextThenFail}
		auth        = want{KindAuth, false, fail, fail}
		integrity   = want{KindIntegrity, false, nextThenFail, nextThenFail}
	)
	for _, tc := range []struct {
		name string
		err  error
		want want
	}{
		{"peer refused", fmt.Errorf("no peer serves sha256:ab: peer %s: %w", dead, refused), unreachable},
		{"peer timed out (black-holed)", fmt.Errorf("peer %s: read model request status: %w", dead, timeout), unreachable},
		{"registry name does not resolve", &url.Error{Op: "Get", URL: "https://registry.invalid/v2/", Err: dns}, unreachable},
		{"peer busy", fmt.Errorf("peer %s: %w", dead, busy{}), unreachable},
		{"registry 503", status(http.StatusServiceUnavailable), unreachable},
		{"registry 500", status(http.StatusInternalServerError), unreachable},
		{"registry 429", status(http.StatusTooManyRequests), unreachable},
		{"registry TLS certificate not trusted", untrusted, auth},
		{"trust policy refuses the registry's signatures", fmt.Errorf("artifact r/x@sha256:ab: %w", scopeRefusal{}), want{KindPolicy, false, fail, fail}},
		{"registry 401", status(http.StatusUnauthorized), auth},
		{"registry 403", status(http.StatusForbidden), auth},
		{"peer refuses the token", unauthorized, auth},
		{"registry 404", status(http.StatusNotFound), miss},
		{"no peer holds it", fmt.Errorf("no peer of 2 holds sha256:ab: %w", errdefs.ErrNotFound), miss},
		{"one peer down, one without it", errors.Join(fmt.Errorf("peer %s: %w", dead, refused), notFound), unreachable},
		{"one peer down, one refusing the token", errors.Join(fmt.Errorf("peer %s: %w", dead, refused), unauthorized), auth},
		{"registry blob digest mismatch", registry.DigestMismatch("model-00001.safetensors", "sha256:aa", "sha256:bb"), integrity},
		{"peer served a wrong unit, the other is down", errors.Join(fmt.Errorf("unit 2: BLAKE3 mismatch: %w", errdefs.ErrDataLoss),
			fmt.Errorf("peer %s: %w", dead, refused)), integrity},
		{"collision", fmt.Errorf("manifest names another identity: %w", errdefs.ErrConflict), want{KindIdentityCollision, false, fail, fail}},
		{"store full", &store.CapacityError{Limit: "max_artifact_bytes", Need: 2, Have: 1}, want{KindCapacity, false, fail, fail}},
		{"protocol garbage", fmt.Errorf("peer protocol: manifest: malformed: %w", errdefs.ErrInvalidArgument), want{KindRemote, false, fail, fail}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Failure{Step: StepRemote, Source: "peer", Err: tc.err}
			classifyRemote(f, tc.err)
			if f.Kind != tc.want.kind || f.Retry != tc.want.retry {
				t.Fatalf("%s (retry %v), want %s (retry %v): %v", f.Kind, f.Retry, tc.want.kind, tc.want.retry, tc.err)
			}
			if got := Decide(Preferred, f); got != tc.want.preferred {
				t.Errorf("preferred: %+v, want %+v", got, tc.want.preferred)
			}
			if got := Decide(Required, f); got != tc.want.required {
				t.Errorf("required: %+v, want %+v", got, tc.want.required)
			}
		})
	}
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("the dead port's error is not a refusal: %v", refused)
	}
}

// scopeRefusal stands in for package trust's Refusal: permission denied,
// with the scope that refused.
type scopeRefusal struct{}

func (scopeRefusal) Error() string      { return "trust policy scope \"r/x\" refuses it" }
func (scopeRefusal) TrustScope() string { return "r/x" }
func (scopeRefusal) Unwrap() error      { return errdefs.ErrPermissionDenied }
