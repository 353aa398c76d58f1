package registry

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	orasreg "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// A registry is reached at the hosts its directory under Options.HostsDir
// names (containerd's hosts.toml, read by containerd's own parser): its
// mirrors in order, then the registry itself (server). A read tries them
// in order and the first that answers serves it; a push goes to the hosts
// with the push capability. A registry without a directory there is
// reached at itself alone, as the options say.

// endpoint is one host a registry's repositories are reached at: a mirror
// from the registry host directory, or the registry itself.
type endpoint struct {
	host      string // host[:port] dialled
	plainHTTP bool
	caps      docker.HostCapabilities
	client    *auth.Client // with the host's credentials, TLS, headers and path
}

// host is an endpoint opened on one repository.
type host struct {
	endpoint
	ref  orasreg.Reference // the repository's reference at this host
	repo *remote.Repository
}

// connector opens repositories: it reads each registry's hosts once and
// keeps their clients (credentials, connection pools) for every repository
// of that registry.
type connector struct {
	o       Options
	cred    auth.CredentialFunc
	cache   auth.Cache
	hostDir func(string) (string, error)
	hosts   docker.RegistryHosts // nil without a registry host directory

	mu        sync.Mutex
	endpoints map[string][]endpoint // by registry
}

func newConnector(ctx context.Context, o Options) *connector {
	c := &connector{o: o, cache: tokenCache{node: auth.NewCache()}, endpoints: map[string][]endpoint{}}
	var store credentials.Store
	var err error
	if o.DockerConfig != "" {
		store, err = credentials.NewStore(o.DockerConfig, credentials.StoreOptions{})
	} else {
		store, err = credentials.NewStoreFromDocker(credentials.StoreOptions{})
	}
	if err != nil {
		log.G(ctx).WithError(err).Warn("docker credentials unavailable; using anonymous access")
		store = nil
	}
	c.cred = credential(store)
	if o.HostsDir != "" {
		// The scheme of a server hosts.toml does not name: plain HTTP for
		// the registries the options talk plain HTTP to.
		c.hostDir = config.HostDirFromRoot(o.HostsDir)
		tls := config.ConfigureHosts(ctx, config.HostOptions{HostDir: c.hostDir, UpdateClient: c.tune})
		plain := config.ConfigureHosts(ctx, config.HostOptions{HostDir: c.hostDir, DefaultScheme: "http", UpdateClient: c.tune})
		c.hosts = func(registry string) ([]docker.RegistryHost, error) {
			if o.plainHTTPFor(registry) {
				return plain(registry)
			}
			return tls(registry)
		}
	}
	return c
}

// open opens the repository of ref at its registry's hosts.
func (c *connector) open(ref orasreg.Reference) (*Remote, error) {
	eps, err := c.endpointsOf(ref.Registry)
	if err != nil {
		return nil, err
	}
	r := &Remote{Ref: ref, conn: c}
	for _, ep := range eps {
		at := orasreg.Reference{Registry: ep.host, Repository: ref.Repository, Reference: ref.Reference}
		r.hosts = append(r.hosts, host{endpoint: ep, ref: at, repo: &remote.Repository{Client: ep.client, Reference: at, PlainHTTP: ep.plainHTTP}})
	}
	for _, h := range r.hosts {
		if h.caps&docker.HostCapabilityPush != 0 {
			r.Repo = h.repo
			break
		}
	}
	if r.Repo == nil {
		refuse := fmt.Errorf("no host of %s in %s has the push capability: %w", ref.Registry, c.o.HostsDir, errdefs.ErrFailedPrecondition)
		r.Repo = &remote.Repository{Reference: ref, Client: &http.Client{Transport: refusing{refuse}}}
	}
	return r, nil
}

// endpointsOf is the hosts of a registry in the order they are tried.
func (c *connector) endpointsOf(registry string) ([]endpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if eps, ok := c.endpoints[registry]; ok {
		return eps, nil
	}
	eps, err := c.build(registry)
	if err != nil {
		return nil, err
	}
	c.endpoints[registry] = eps
	return eps, nil
}

func (c *connector) build(registry string) ([]endpoint, error) {
	if c.hosts != nil {
		dir, err := c.hostDir(registry)
		switch {
		case err == nil:
			rhs, err := c.hosts(registry)
			if err != nil {
				return nil, fmt.Errorf("registry host directory %s: %w", dir, err)
			}
			eps := make([]endpoint, 0, len(rhs))
			for _, h := range rhs {
				eps = append(eps, c.endpoint(registry, h))
			}
			return eps, nil
		case !errdefs.IsNotFound(err):
			return nil, fmt.Errorf("registry host directory of %s: %w", registry, err)
		}
	}
	all := docker.HostCapabilityPull | docker.HostCapabilityResolve | docker.HostCapabilityPush
	return []endpoint{{host: registry, plainHTTP: c.o.plainHTTPFor(registry), caps: all, client: c.authClient(newHTTPClient(c.o), nil)}}, nil
}

// endpoint is a host of the registry host directory, its requests sent
// under its path and, to a mirror, naming the registry (containerd's "ns"
// query).
func (c *connector) endpoint(registry string, h docker.RegistryHost) endpoint {
	rt := h.Client.Transport
	ns := ""
	if h.Host != registry && (registry != "docker.io" || h.Host != "registry-1.docker.io") {
		ns = registry
	}
	if h.Path != "/v2" || ns != "" {
		rt = &hostTransport{next: rt, host: h.Host, path: h.Path, ns: ns}
	}
	client := &http.Client{Transport: retry.NewTransport(rt)}
	return endpoint{host: h.Host, plainHTTP: h.Scheme == "http", caps: h.Capabilities, client: c.authClient(client, h.Header)}
}

// tune gives a client the registry host directory made (its TLS and dialer)
// the transport of every registry client (newTransport).
func (c *connector) tune(hc *http.Client) error {
	tr, ok := hc.Transport.(*http.Transport)
	if !ok {
		return fmt.Errorf("registry host client has a %T transport: %w", hc.Transport, errdefs.ErrNotImplemented)
	}
	tc := tr.TLSClientConfig
	if tc == nil {
		tc = &tls.Config{}
	}
	tc = tc.Clone()
	if c.o.Insecure {
		tc.InsecureSkipVerify = true
	}
	t := newTransport(c.o, tc)
	t.DialContext, t.Proxy = tr.DialContext, tr.Proxy
	hc.Transport = t
	return nil
}

// authClient authenticates a host's requests with the request's own
// credential (WithCredential) or the Docker credentials of that host,
// sending header with each.
func (c *connector) authClient(hc *http.Client, header http.Header) *auth.Client {
	client := &auth.Client{Client: hc, Cache: c.cache, Credential: c.cred, Header: header.Clone()}
	ua := c.o.UserAgent
	if ua == "" {
		ua = "weightsnap"
	}
	client.SetUserAgent(ua)
	return client
}

// hostTransport sends a host's registry requests under its API path
// (override_path, or a path in its URL) and names the registry to a mirror.
type hostTransport struct {
	next       http.RoundTripper
	host, path string
	ns         string // the registry a mirror serves; "" for the registry itself
}

func (t *hostTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rest, api := strings.CutPrefix(req.URL.Path, "/v2/")
	if req.URL.Host != t.host || (!api && t.ns == "") {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	if api {
		req.URL.Path, req.URL.RawPath = t.path+"/"+rest, ""
	}
	if t.ns != "" {
		q := req.URL.Query()
		q.Set("ns", t.ns)
		req.URL.RawQuery = q.Encode()
	}
	return t.next.RoundTrip(req)
}

// refusing is the transport of a registry no host may push to.
type refusing struct{ err error }

func (r refusing) RoundTrip(*http.Request) (*http.Response, error) { return nil, r.err }

// try runs op on the remote's hosts that have capability c, in order, until
// one answers; a host that fails passes it to the next, and the last one's
// error is returned. d, when not "", is the blob op reads: its later reads
// start at the host that served it.
func (r *Remote) try(ctx context.Context, c docker.HostCapabilities, d digest.Digest, op func(h *host) error) error {
	start := 0
	if d != "" {
		if v, ok := r.served.Load(d); ok {
			start = v.(int)
		}
	}
	var cands []int
	for i := start; i < len(r.hosts); i++ {
		if r.hosts[i].caps&c != 0 {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return fmt.Errorf("no host of %s in %s has the %s capability: %w", r.Ref.Registry, r.conn.o.HostsDir, capability(c), errdefs.ErrFailedPrecondition)
	}
	var err error
	for k, i := range cands {
		h := &r.hosts[i]
		if err = op(h); err == nil {
			if d != "" && i != start {
				r.served.Store(d, i)
			}
			return nil
		}
		if h.host != r.Ref.Registry {
			err = fmt.Errorf("%s: %w", h.host, err)
		}
		if ctx.Err() != nil || k == len(cands)-1 {
			return err
		}
		lg := log.G(ctx).WithError(err).WithField("host", h.host)
		if errdefs.IsNotFound(err) {
			lg.Debug("registry host does not have it; trying the next")
		} else {
			lg.Warn("registry host failed; trying the next")
		}
	}
	return err
}

func capability(c docker.HostCapabilities) string {
	switch c {
	case docker.HostCapabilityResolve:
		return "resolve"
	case docker.HostCapabilityPush:
		return "push"
	}
	return "pull"
}
