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
