package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// TestPlainHTTPRegistry: a registry that answers HTTPS in plain HTTP is
// named so, with the flag and the configuration key that fix it.
func TestPlainHTTPRegistry(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/models/m:v1"
	r, err := New(context.Background(), ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = r.FetchManifest(context.Background())
	if !errdefs.IsInvalidArgument(err) {
		t.Fatalf("FetchManifest over HTTPS from a plain-HTTP registry: %v, want invalid argument", err)
	}
	for _, want := range []string{"plain HTTP", "--plain-http", "plain_http = true under [resolve]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

func TestParseReference(t *testing.T) {
	const pin = "@sha256:7cc4b5aefd1d0cadf8d97d4350462ba51c694ebca145b08d7d41b41acc8db5aa"
	for _, tc := range []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"library/busybox" + pin, "docker.io/library/busybox" + pin},
		{"org/model:v1", "docker.io/org/model:v1"},
		{"127.0.0.1:5000/models/x:v1", "127.0.0.1:5000/models/x:v1"},
		{"reg.example/models/llama", "reg.example/models/llama:latest"},
		{"localhost/m" + pin, "localhost/m" + pin},
		{"Upper/Case", ""},
		{"reg.example/m:bad tag", ""},
	} {
		r, err := ParseReference(tc.in)
		if tc.want == "" {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("ParseReference(%q) = %v, %v; want invalid argument", tc.in, r, err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("ParseReference(%q) = %q, %v; want %q", tc.in, r.String(), err, tc.want)
		}
	}
}
