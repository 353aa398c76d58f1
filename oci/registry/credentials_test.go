package registry

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// basicRegistry is a registry that answers a manifest HEAD of models/a:v1
// to user:pass alone (Basic auth, as distribution's htpasswd does) and
// records every Authorization it was sent.
type basicRegistry struct {
	mu    sync.Mutex
	auths []string
}

func (b *basicRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.auths = append(b.auths, r.Header.Get("Authorization"))
	b.mu.Unlock()
	if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("user:pass")) {
		w.Header().Set("Www-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/v2/models/a/manifests/v1" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	w.Header().Set("Docker-Content-Digest", "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
	w.Header().Set("Content-Length", "2")
	if r.Method == http.MethodGet {
		w.Write([]byte("{}"))
	}
}

// TestPullCredentialScope: a request under WithCredential uses that
// credential for its host alone; a token (here the Basic one) got with one
// credential never serves a request with another or with none, on the same
// connector (one long-lived client, as the node's configured registry is):
// after a HEAD with the right password, one with a wrong password and one
// with none (no Docker config: anonymous) each get the registry's 401.
func TestPullCredentialScope(t *testing.T) {
	reg := &basicRegistry{}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	ctx := context.Background()
	r, err := New(ctx, host+"/models/a:v1", Options{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	right := auth.Credential{Username: "user", Password: "pass"}
	wrong := auth.Credential{Username: "user", Password: "nope"}
	for i, tc := range []struct {
		name string
		ctx  context.Context
		ok   bool
	}{
		{"right", WithCredential(ctx, host, right), true},
		{"wrong", WithCredential(ctx, host, wrong), false},
		{"none", ctx, false},
		{"right, another host's", WithCredential(ctx, "other:5000", right), false},
		{"right again", WithCredential(ctx, host, right), true},
	} {
		_, err := r.Head(tc.ctx)
		if tc.ok != (err == nil) {
			t.Fatalf("%d %s: %v, want ok %v", i, tc.name, err, tc.ok)
		}
		if !tc.ok && !errdefs.IsUnauthorized(err) {
			t.Fatalf("%d %s: %v, want unauthorized", i, tc.name, err)
		}
	}
	if c, ok := CredentialOf(WithCredential(ctx, host, right), strings.ToUpper(host)); !ok || c != right {
		t.Fatalf("CredentialOf: %v %v", c.Username, ok)
	}
	if _, ok := CredentialOf(ctx, host); ok {
		t.Fatal("CredentialOf without WithCredential: ok")
	}
}
