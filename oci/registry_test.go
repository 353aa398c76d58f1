package oci

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeRegistry is a minimal in-memory OCI distribution registry for unit
// tests and benchmarks: blobs (with ranges, mounts and monolithic uploads)
// and manifests by tag or digest, per repository.
type fakeRegistry struct {
	srv *httptest.Server

	mu        sync.Mutex
	blobs     map[digest.Digest][]byte
	repoBlobs map[string]map[digest.Digest]bool
	manifests map[string]map[string]fakeManifest // repo -> tag or digest -> manifest
	uploads   map[string]string                  // upload id -> repo

	basicAuth  string                                         // "user:pass" required on every request, if set
	noMount    bool                                           // answer mounts with 202 (upload instead)
	noRanges   bool                                           // ignore Range headers; under mu (setNoRanges)
	redirect   bool                                           // send blob GETs to the same server as "localhost"; under mu (setRedirect)
	corrupt    func(d digest.Digest) int64                    // offset of a byte to flip in served blob d, or -1; under mu (setCorrupt)
	hold       func(d digest.Digest) (int64, <-chan struct{}) // where a whole GET of blob d waits, and until when; under mu (setHold)
	served     atomic.Int64                                   // blob body bytes served
	rangeGets  atomic.Int64
	uploaded   atomic.Int64 // blob bytes received
	mountCount atomic.Int64
}

type fakeManifest struct {
	mediaType string
	raw       []byte
}

var fakePathRE = regexp.MustCompile(`^/v2/(.+)/(blobs|manifests)/(.*)$`)

func newFakeRegistry(t testing.TB) *fakeRegistry {
	f := &fakeRegistry{}
	f.init()
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRegistry) init() {
	f.blobs, f.repoBlobs = map[digest.Digest][]byte{}, map[string]map[digest.Digest]bool{}
	f.manifests, f.uploads = map[string]map[string]fakeManifest{}, map[string]string{}
}

// host is the registry part of references.
func (f *fakeRegistry) host() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fakeRegistry) serve(w http.ResponseWriter, r *http.Request) {
	if f.basicAuth != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u+":"+p != f.basicAuth {
			w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
	}
	if r.URL.Path == "/v2/" {
		return
	}
	m := fakePathRE.FindStringSubmatch(r.URL.Path)
	if m == nil {
		http.NotFound(w, r)
		return
	}
	repo, kind, rest := m[1], m[2], m[3]
	switch {
	case kind == "blobs" && strings.HasPrefix(rest, "uploads/"):
		f.upload(w, r, repo, strings.TrimPrefix(rest, "uploads/"))
	case kind == "blobs":
		f.blob(w, r, repo, digest.Digest(rest))
	default:
		f.manifest(w, r, repo, rest)
	}
}

func (f *fakeRegistry) blob(w http.ResponseWriter, r *http.Request, repo string, d digest.Digest) {
	f.mu.Lock()
	b, ok := f.blobs[d]
	ok = ok && f.repoBlobs[repo][d]
	noRanges, corrupt, redirect, hold := f.noRanges, f.corrupt, f.redirect, f.hold
	f.mu.Unlock()
	if !ok {
		http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	if redirect && r.Method == http.MethodGet && r.URL.Query().Get("direct") == "" {
		_, port, _ := net.SplitHostPort(f.host())
		http.Redirect(w, r, "http://localhost:"+port+r.URL.Path+"?direct=1", http.StatusTemporaryRedirect)
		return
	}
	if corrupt != nil {
		if off := corrupt(d); off >= 0 && off < int64(len(b)) {
			b = bytes.Clone(b)
			b[off] ^= 0xff
		}
	}
	if noRanges {
		r.Header.Del("Range")
	} else if r.Header.Get("Range") != "" {
		f.rangeGets.Add(1)
	}
	w.Header().Set("Docker-Content-Digest", d.String())
	w.Header().Set("Content-Type", "application/octet-stream")
	cw := &countingWriter{ResponseWriter: w, n: &f.served}
	if hold != nil && r.Method == http.MethodGet && r.Header.Get("Range") == "" {
		if at, release := hold(d); at >= 0 && at < int64(len(b)) {
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			cw.Write(b[:at])
			w.(http.Flusher).Flush()
			<-release
			cw.Write(b[at:])
			return
		}
	}
	if noRanges {
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if r.Method != http.MethodHead {
			cw.Write(b)
		}
		return
	}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(b))
}

// setNoRanges and setCorrupt change how blobs are served. They take the
// lock: a handler from an earlier, failed pull may still be serving.
func (f *fakeRegistry) setNoRanges(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noRanges = v
}

// setRedirect sends blob GETs to another host name of the same server, as a
// registry that serves its blobs from object storage does.
func (f *fakeRegistry) setRedirect(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.redirect = v
}

func (f *fakeRegistry) setCorrupt(fn func(d digest.Digest) int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.corrupt = fn
}

// setHold makes a whole GET of a blob send the bytes before the offset fn
// gives (-1: none held) and wait until its channel closes to send the rest.
func (f *fakeRegistry) setHold(fn func(d digest.Digest) (int64, <-chan struct{})) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = fn
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (f *fakeRegistry) upload(w http.ResponseWriter, r *http.Request, repo, id string) {
	switch r.Method {
	case http.MethodPost:
		q := r.URL.Query()
		if d, from := digest.Digest(q.Get("mount")), q.Get("from"); d != "" && from != "" && !f.noMount {
			f.mu.Lock()
			ok := f.repoBlobs[from][d]
			if ok {
				f.link(repo, d)
			}
			f.mu.Unlock()
			if ok {
				f.mountCount.Add(1)
				w.Header().Set("Location", "/v2/"+repo+"/blobs/"+d.String())
				w.Header().Set("Docker-Content-Digest", d.String())
				w.WriteHeader(http.StatusCreated)
				return
			}
		}
		var rnd [8]byte
		rand.Read(rnd[:])
		uid := hex.EncodeToString(rnd[:])
		f.mu.Lock()
		f.uploads[uid] = repo
		f.mu.Unlock()
		w.Header().Set("Location", "/v2/"+repo+"/blobs/uploads/"+uid)
		w.WriteHeader(http.StatusAccepted)
	case http.MethodPut:
		f.mu.Lock()
		_, ok := f.uploads[id]
		delete(f.uploads, id)
		f.mu.Unlock()
		if !ok {
			http.Error(w, "unknown upload", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d := digest.Digest(r.URL.Query().Get("digest"))
		if d.Validate() != nil || digest.FromBytes(body) != d {
			http.Error(w, `{"errors":[{"code":"DIGEST_INVALID"}]}`, http.StatusBadRequest)
			return
		}
		f.uploaded.Add(int64(len(body)))
		f.mu.Lock()
		f.blobs[d] = body
		f.link(repo, d)
		f.mu.Unlock()
		w.Header().Set("Docker-Content-Digest", d.String())
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func (f *fakeRegistry) link(repo string, d digest.Digest) {
	if f.repoBlobs[repo] == nil {
		f.repoBlobs[repo] = map[digest.Digest]bool{}
	}
	f.repoBlobs[repo][d] = true
}

func (f *fakeRegistry) manifest(w http.ResponseWriter, r *http.Request, repo, ref string) {
	switch r.Method {
	case http.MethodPut:
		raw, _ := io.ReadAll(r.Body)
		d := digest.FromBytes(raw)
		var m ocispec.Manifest
		if err := jsonUnmarshal(raw, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, l := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			// An index (the referrers tag schema's) has neither.
			if l.Digest != "" && !f.repoBlobs[repo][l.Digest] {
				http.Error(w, `{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN"}]}`, http.StatusBadRequest)
				return
			}
		}
		if f.manifests[repo] == nil {
			f.manifests[repo] = map[string]fakeManifest{}
		}
		fm := fakeManifest{mediaType: r.Header.Get("Content-Type"), raw: raw}
		f.manifests[repo][d.String()] = fm
		f.manifests[repo][ref] = fm
		w.Header().Set("Docker-Content-Digest", d.String())
		w.WriteHeader(http.StatusCreated)
	case http.MethodGet, http.MethodHead:
		f.mu.Lock()
		fm, ok := f.manifests[repo][ref]
		f.mu.Unlock()
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", fm.mediaType)
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(fm.raw).String())
		w.Header().Set("Content-Length", fmt.Sprint(len(fm.raw)))
		if r.Method == http.MethodGet {
			w.Write(fm.raw)
		}
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func manifestV2() specs.Versioned { return specs.Versioned{SchemaVersion: 2} }
