package cri

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/oci/registry"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// fakeRegistry answers a manifest HEAD of models/a:v1 to user:pass (Basic
// auth), of models/b:v1 to none (403 to user:pass, 401 without), counting
// the requests it is sent, and fails the test on any GET (a check
// transfers no payload).
type fakeRegistry struct {
	t     *testing.T
	heads atomic.Int32
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodHead {
		f.t.Errorf("%s %s: a credential check sent more than a HEAD", r.Method, r.URL.Path)
	}
	f.heads.Add(1)
	good := r.Header.Get("Authorization") == "Basic "+base64.StdEncoding.EncodeToString([]byte("user:pass"))
	switch {
	case r.Header.Get("Authorization") == "" || (!good && r.URL.Path == "/v2/models/a/manifests/v1"):
		w.Header().Set("Www-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusUnauthorized)
	case r.URL.Path == "/v2/models/b/manifests/v1":
		w.WriteHeader(http.StatusForbidden)
	case r.URL.Path == "/v2/models/a/manifests/v1":
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
		w.Header().Set("Content-Length", "2")
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// TestAccessCheck: the registry's answer to each credential, for each
// repository; a positive answer is kept per credential and repository for
// the lifetime (no request while it lasts; asked again after it, and at
// every check with lifetime 0), a refusal never; the key is no secret.
func TestAccessCheck(t *testing.T) {
	reg := &fakeRegistry{t: t}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // the node has no credentials
	ctx := context.Background()
	open := func(repo string) *registry.Remote {
		r, err := registry.New(ctx, host+"/"+repo+":v1", registry.Options{PlainHTTP: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Each check is another pull: a context of its own, with its own token cache.
	right := func() context.Context {
		return registry.WithCredential(ctx, host, auth.Credential{Username: "user", Password: "pass"})
	}
	wrong := func() context.Context {
		return registry.WithCredential(ctx, host, auth.Credential{Username: "user", Password: "nope"})
	}
	none := func() context.Context { return ctx }
	for _, ttl := range []time.Duration{time.Minute, 0} {
		now := time.Unix(1000, 0)
		a, err := NewAccess(ttl)
		if err != nil {
			t.Fatal(err)
		}
		a.now = func() time.Time { return now }
		for i, tc := range []struct {
			name  string
			ctx   func() context.Context
			repo  string
			class func(error) bool // nil: accepted
			heads int32            // requests the registry got for it
		}{
			{"right", right, "models/a", nil, 2}, // 401, then with the password
			{"right, kept", right, "models/a", nil, 0},
			{"wrong", wrong, "models/a", errdefs.IsUnauthorized, 2},
			{"none", none, "models/a", errdefs.IsUnauthorized, 1},
			{"right, another repository", right, "models/b", errdefs.IsPermissionDenied, 2},
			{"right, missing", right, "models/c", errdefs.IsNotFound, 2},
			{"wrong again: refusals are not kept", wrong, "models/a", errdefs.IsUnauthorized, 2},
		} {
			if ttl == 0 && tc.name == "right, kept" {
				tc.heads = 2
			}
			before := reg.heads.Load()
			err := a.Check(tc.ctx(), open(tc.repo))
			if (tc.class == nil) != (err == nil) || (err != nil && !tc.class(err)) {
				t.Fatalf("ttl %s, %d %s: %v", ttl, i, tc.name, err)
			}
			if got := reg.heads.Load() - before; got != tc.heads {
				t.Fatalf("ttl %s, %d %s: the registry got %d requests, want %d", ttl, i, tc.name, got, tc.heads)
			}
		}
		if want := map[time.Duration]int{time.Minute: 1, 0: 0}[ttl]; a.Len() != want {
			t.Fatalf("ttl %s: %d answers kept, want %d", ttl, a.Len(), want)
		}
		for k := range a.ok {
			if strings.Contains(string(k[:]), "pass") {
				t.Fatal("the key holds the password")
			}
		}
		now = now.Add(ttl)
		before := reg.heads.Load()
		if err := a.Check(right(), open("models/a")); err != nil || reg.heads.Load()-before != 2 {
			t.Fatalf("ttl %s: after the lifetime: %v, %d requests, want the registry asked", ttl, err, reg.heads.Load()-before)
		}
	}
	if _, err := NewAccess(-time.Second); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a negative lifetime: %v", err)
	}
}

// TestCredentialOf: each form of a CRI AuthConfig, and errors that never
// quote the secret.
func TestCredentialOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtime.AuthConfig
		want auth.Credential
		ok   bool
		err  bool
	}{
		{"none", nil, auth.EmptyCredential, false, false},
		{"empty", &runtime.AuthConfig{}, auth.EmptyCredential, false, false},
		{"password", &runtime.AuthConfig{Username: "u", Password: "p"}, auth.Credential{Username: "u", Password: "p"}, true, false},
		{"auth", &runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("u:p:q"))}, auth.Credential{Username: "u", Password: "p:q"}, true, false},
		{"identity token", &runtime.AuthConfig{IdentityToken: "rt"}, auth.Credential{RefreshToken: "rt"}, true, false},
		{"registry token", &runtime.AuthConfig{RegistryToken: "at"}, auth.Credential{AccessToken: "at"}, true, false},
		{"bad auth", &runtime.AuthConfig{Auth: "secret!!"}, auth.EmptyCredential, false, true},
		{"auth without colon", &runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("secret"))}, auth.EmptyCredential, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := credentialOf(tc.in)
			if (err != nil) != tc.err || ok != tc.ok || got != tc.want {
				t.Fatalf("credentialOf = %+v %v %v", got, ok, err)
			}
			if err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), tc.in.GetAuth())) {
				t.Fatalf("error quotes the secret: %v", err)
			}
		})
	}
}
