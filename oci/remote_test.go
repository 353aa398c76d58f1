package oci

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
)

// TestDockerCredentials: credentials come from a Docker config file, as oras
// and nerdctl read them; without them the registry's 401 is a typed error.
func TestDockerCredentials(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	f.basicAuth = "alice:s3cret"
	cfg := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte(f.basicAuth))
	if err := os.WriteFile(cfg, []byte(`{"auths":{"`+f.host()+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	anon := remoteFor(t, f, "private/x:v1")
	if _, err := Push(ctx, l, anon, PushOptions{}); !errdefs.IsUnauthorized(err) {
		t.Fatalf("anonymous push: %v", err)
	}
	r, err := registry.New(ctx, f.host()+"/private/x:v1", registry.Options{PlainHTTP: true, DockerConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	pl, _, err := Pull(ctx, storetest.Open(t), r, PullOptions{Ranges: RangesOn, ChunkSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	pl.Close()
}

// TestInsecureTLS: a registry with a self-signed certificate needs --insecure.
func TestInsecureTLS(t *testing.T) {
	ctx := context.Background()
	f := &fakeRegistry{}
	f.init()
	srv := httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	cfg := filepath.Join(t.TempDir(), "none.json")
	strict, _ := registry.New(ctx, host+"/x/y:v1", registry.Options{DockerConfig: cfg})
	_, _, err := strict.FetchManifest(ctx)
	if err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("a self-signed certificate was accepted: %v", err)
	}
	loose, _ := registry.New(ctx, host+"/x/y:v1", registry.Options{DockerConfig: cfg, Insecure: true})
	_, _, err = loose.FetchManifest(ctx)
	if !errdefs.IsNotFound(err) {
		t.Fatalf("with --insecure: want not found, got %v", err)
	}
	if errdefs.IsInvalidArgument(err) {
		t.Fatal(err)
	}
}
