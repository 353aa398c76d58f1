package registry

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeRegistry serves the blobs and manifests it holds under its API path
// and records the requests it got.
type fakeRegistry struct {
	*httptest.Server
	api       string // "/v2"
	blobs     map[digest.Digest][]byte
	manifests map[string][]byte // by tag and by digest

	mu   sync.Mutex
	reqs []*http.Request
}

const manifestJSON = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`

func newFakeRegistry(t *testing.T, tls bool, api string, blobs ...[]byte) *fakeRegistry {
	f := &fakeRegistry{api: api, blobs: map[digest.Digest][]byte{}, manifests: map[string][]byte{}}
	for _, b := range blobs {
		f.blobs[digest.FromBytes(b)] = b
	}
	f.manifests["v1"] = []byte(manifestJSON)
	f.manifests[digest.FromString(manifestJSON).String()] = []byte(manifestJSON)
	h := http.HandlerFunc(f.serve)
	if tls {
		f.Server = httptest.NewTLSServer(h)
	} else {
		f.Server = httptest.NewServer(h)
	}
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRegistry) serve(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req.Clone(context.Background()))
	f.mu.Unlock()
	rest, ok := strings.CutPrefix(req.URL.Path, f.api+"/models/m/")
	if !ok {
		http.NotFound(w, req)
		return
	}
	if d, ok := strings.CutPrefix(rest, "blobs/"); ok && f.blobs[digest.Digest(d)] != nil {
		http.ServeContent(w, req, "", time.Time{}, strings.NewReader(string(f.blobs[digest.Digest(d)])))
		return
	}
	if ref, ok := strings.CutPrefix(rest, "manifests/"); ok && f.manifests[ref] != nil {
		w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
		w.Header().Set("Docker-Content-Digest", digest.FromString(manifestJSON).String())
		http.ServeContent(w, req, "", time.Time{}, strings.NewReader(string(f.manifests[ref])))
		return
	}
	http.NotFound(w, req)
}

// requests are the paths of the requests f got (with their query).
func (f *fakeRegistry) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.reqs {
		out = append(out, r.URL.RequestURI())
	}
	return out
}

func (f *fakeRegistry) host() string { return f.Listener.Addr().String() }

// hostsDir writes a registry host directory with origin's hosts.toml.
func hostsDir(t *testing.T, origin, toml string) string {
	root := t.TempDir()
	dir := filepath.Join(root, strings.Replace(origin, ":", "_", 1)+"_")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func readBlob(t *testing.T, r *Remote, b []byte, off, n int64) string {
	t.Helper()
	desc := ocispec.Descriptor{Digest: digest.FromBytes(b), Size: int64(len(b))}
	rc, err := r.GetBlob(context.Background(), desc, off, n)
	if err != nil {
		t.Fatalf("GetBlob: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// TestMirrorServes: the first mirror that has a blob serves it, with the
// header hosts.toml gives it and the registry it stands for (ns); the
// origin is not asked.
func TestMirrorServes(t *testing.T) {
	blob := []byte("weights of the mirror")
	origin := newFakeRegistry(t, false, "/v2", blob)
	mirror := newFakeRegistry(t, false, "/v2", blob)
	dir := hostsDir(t, origin.host(), fmt.Sprintf(`server = "http://%s"
[host."http://%s"]
  capabilities = ["pull", "resolve"]
  [host."http://%s".header]
    x-mirror-token = "secret"
`, origin.host(), mirror.host(), mirror.host()))
	r, err := New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, r, blob, 0, -1); got != string(blob) {
		t.Fatalf("blob %q", got)
	}
	if got := readBlob(t, r, blob, 3, 4); got != string(blob[3:7]) {
		t.Fatalf("range %q", got)
	}
	if _, _, err := r.FetchManifest(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reqs := origin.requests(); len(reqs) != 0 {
		t.Errorf("the origin was asked %v", reqs)
	}
	reqs := mirror.requests()
	if len(reqs) != 3 {
		t.Fatalf("mirror requests %v", reqs)
	}
	for _, req := range mirror.reqs {
		if req.URL.Query().Get("ns") != origin.host() || req.Header.Get("X-Mirror-Token") != "secret" || req.Header.Get("User-Agent") != "weightsnap" {
			t.Errorf("mirror request %s: ns %q, header %q, agent %q", req.URL, req.URL.Query().Get("ns"), req.Header.Get("X-Mirror-Token"), req.Header.Get("User-Agent"))
		}
	}
}

// TestMirrorFallsBack: a mirror that does not have the blob, or is down,
// passes the read to the next host, then the origin; the blob's later
// reads go straight to the host that served it.
func TestMirrorFallsBack(t *testing.T) {
	blob := []byte("weights only the origin has")
	origin := newFakeRegistry(t, false, "/v2", blob)
	empty := newFakeRegistry(t, false, "/v2")
	down := newFakeRegistry(t, false, "/v2")
	down.Close()
	dir := hostsDir(t, origin.host(), fmt.Sprintf(`server = "http://%s"
[host."http://%s"]
  capabilities = ["pull", "resolve"]
[host."http://%s"]
  capabilities = ["pull", "resolve"]
`, origin.host(), empty.host(), down.host()))
	r, err := New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := readBlob(t, r, blob, 1, 5); got != string(blob[1:6]) {
			t.Fatalf("range %q", got)
		}
	}
	if reqs := empty.requests(); len(reqs) != 1 {
		t.Errorf("the empty mirror was asked %v, want once", reqs)
	}
	if reqs := origin.requests(); len(reqs) != 3 {
		t.Errorf("the origin was asked %v, want 3 times", reqs)
	}
	// A blob no host has is the origin's not found.
	missing := []byte("nobody has this")
	_, err = r.GetBlob(context.Background(), ocispec.Descriptor{Digest: digest.FromBytes(missing), Size: int64(len(missing))}, 0, -1)
	if !errdefs.IsNotFound(err) || strings.Contains(err.Error(), empty.host()) {
		t.Errorf("a blob no host has: %v, want the origin's not found", err)
	}
}

// TestHostCapabilities: a pull-only mirror serves reads by digest, not tag
// resolution; pushes go to the push host; a registry no host may push to
// refuses pushes.
func TestHostCapabilities(t *testing.T) {
	blob := []byte("layer")
	origin := newFakeRegistry(t, false, "/v2", blob)
	mirror := newFakeRegistry(t, false, "/v2", blob)
	dir := hostsDir(t, origin.host(), fmt.Sprintf(`server = "http://%s"
[host."http://%s"]
  capabilities = ["pull"]
`, origin.host(), mirror.host()))
	r, err := New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.FetchManifest(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reqs := origin.requests(); len(reqs) != 1 || !strings.HasSuffix(reqs[0], "/manifests/v1") {
		t.Errorf("tag resolved at the origin: %v", reqs)
	}
	pinned, err := r.Sibling(origin.host() + "/models/m@" + digest.FromString(manifestJSON).String())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pinned.FetchManifest(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reqs := mirror.requests(); len(reqs) != 1 || !strings.Contains(reqs[0], "/manifests/sha256:") {
		t.Errorf("digest read at the mirror: %v", reqs)
	}
	if r.Repo.Reference.Registry != origin.host() {
		t.Errorf("pushes go to %s, want the origin %s", r.Repo.Reference.Registry, origin.host())
	}

	dir = hostsDir(t, origin.host(), fmt.Sprintf(`server = "http://%s"
capabilities = ["pull", "resolve"]
`, origin.host()))
	r, err = New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Repo.Exists(context.Background(), ocispec.Descriptor{Digest: digest.FromBytes(blob), Size: 5}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("push to a registry without a push host: %v, want failed precondition", err)
	}
}

// TestOverridePath: a host with override_path is asked under its own API
// path; a TLS host is trusted by the ca hosts.toml names.
func TestOverridePath(t *testing.T) {
	blob := []byte("under a custom root")
	origin := newFakeRegistry(t, true, "/api/registry", blob)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: origin.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := hostsDir(t, origin.host(), fmt.Sprintf(`server = "https://%s"
[host."https://%s/api/registry"]
  capabilities = ["pull", "resolve", "push"]
  override_path = true
  ca = %q
`, origin.host(), origin.host(), ca))
	r, err := New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, r, blob, 0, -1); got != string(blob) {
		t.Fatalf("blob %q", got)
	}
	if reqs := origin.requests(); len(reqs) != 1 || !strings.HasPrefix(reqs[0], "/api/registry/models/m/blobs/") {
		t.Errorf("requests %v", reqs)
	}
}

// TestNoHostsDirectory: a registry the directory has no entry for is
// reached as the options say, as without a directory.
func TestNoHostsDirectory(t *testing.T) {
	blob := []byte("direct")
	origin := newFakeRegistry(t, false, "/v2", blob)
	r, err := New(context.Background(), origin.host()+"/models/m:v1", Options{HostsDir: t.TempDir(), PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, r, blob, 0, -1); got != string(blob) {
		t.Fatalf("blob %q", got)
	}
	if reqs := origin.requests(); len(reqs) != 1 || strings.Contains(reqs[0], "ns=") {
		t.Errorf("requests %v", reqs)
	}
}

// TestPlainHTTPHosts: PlainHTTPHosts talks plain HTTP to the registries it
// names and HTTPS to every other, in one set of options, with and without
// a registry host directory.
func TestPlainHTTPHosts(t *testing.T) {
	blob := []byte("per host")
	local := newFakeRegistry(t, false, "/v2", blob)
	remote := newFakeRegistry(t, true, "/v2", blob)
	for _, hostsDir := range []string{"", t.TempDir()} {
		o := Options{PlainHTTPHosts: []string{local.host()}, Insecure: true, HostsDir: hostsDir}
		for _, f := range []*fakeRegistry{local, remote} {
			r, err := New(context.Background(), f.host()+"/models/m:v1", o)
			if err != nil {
				t.Fatal(err)
			}
			if got := readBlob(t, r, blob, 0, -1); got != string(blob) {
				t.Fatalf("hosts dir %q: blob %q from %s", hostsDir, got, f.host())
			}
		}
		r, err := New(context.Background(), local.host()+"/models/m:v1", Options{PlainHTTPHosts: []string{remote.host()}, Insecure: true, HostsDir: hostsDir})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.FetchManifest(context.Background()); err == nil {
			t.Fatalf("hosts dir %q: HTTPS to a plain-HTTP registry not named answered", hostsDir)
		}
	}
}

// TestPlainHTTPServerLine: docs/registries.md's hosts.toml form, a plain-HTTP
// server line alone, reaches a plain-HTTP registry without PlainHTTP.
func TestPlainHTTPServerLine(t *testing.T) {
	blob := []byte("server line")
	local := newFakeRegistry(t, false, "/v2", blob)
	dir := hostsDir(t, local.host(), fmt.Sprintf("server = %q\n", local.URL))
	r, err := New(context.Background(), local.host()+"/models/m:v1", Options{HostsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, r, blob, 0, -1); got != string(blob) {
		t.Fatalf("blob %q", got)
	}
}
