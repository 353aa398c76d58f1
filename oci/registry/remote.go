// Package registry is the client of an OCI registry: the repository of a
// reference at the registry's hosts (containerd's registry host directory:
// mirrors, then the registry) with their credentials, plain HTTP or TLS and
// connection pools, manifests and small blobs read verified, ranged blob
// GETs with their probe, and the one retry policy of registry requests.
package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	orasreg "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// Options say how to reach a registry.
type Options struct {
	// PlainHTTP talks HTTP instead of HTTPS (local test registries) to
	// every registry.
	PlainHTTP bool
	// PlainHTTPHosts are the registries (host[:port], as references name
	// them) talked to in plain HTTP when PlainHTTP is false: a local
	// registry beside HTTPS ones in one command.
	PlainHTTPHosts []string
	// Insecure skips TLS certificate verification.
	Insecure bool
	// DockerConfig is the Docker config file holding credentials and
	// credential helpers; "" means $DOCKER_CONFIG/config.json or
	// ~/.docker/config.json, as oras and nerdctl read them.
	DockerConfig string
	// Connections sizes the connection pool (parallel transfers); 0 means 16.
	Connections int
	// UserAgent is sent with every request.
	UserAgent string
	// HostsDir is containerd's registry host directory
	// (/etc/containerd/certs.d: HOST[_PORT_]/hosts.toml with mirrors,
	// capabilities, ca, client, skip_verify, header, override_path); ""
	// reads none. A registry it has no directory for is reached as
	// PlainHTTP and Insecure say; in one it has, PlainHTTP is the scheme of
	// a server it does not name and Insecure skips verification of every
	// host.
	HostsDir string
}

// plainHTTPFor says whether registry is talked to in plain HTTP.
func (o *Options) plainHTTPFor(registry string) bool {
	return o.PlainHTTP || slices.Contains(o.PlainHTTPHosts, registry)
}

// Remote is a client for one repository of a registry, with the reference
// (tag or digest) it was opened with. Its reads go to the registry's hosts
// in order (try).
type Remote struct {
	// Repo is where pushes go: the repository at the first host with the
	// push capability (the registry itself unless its hosts.toml says
	// otherwise).
	Repo   *remote.Repository
	Ref    orasreg.Reference
	conn   *connector
	hosts  []host
	served sync.Map // digest → index of the host that last served the blob
}

// New opens the repository of ref ("host[:port]/repo[:tag|@digest]").
func New(ctx context.Context, ref string, o Options) (*Remote, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	return newConnector(ctx, o).open(r)
}

// Sibling opens another reference with the same clients (credentials,
// pools, registry hosts).
func (r *Remote) Sibling(ref string) (*Remote, error) {
	p, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	return r.conn.open(p)
}

// ParseReference reads an image or artifact reference as containerd and
// nerdctl do: a short name is Docker Hub's ("busybox" is
// docker.io/library/busybox:latest), a name without tag or digest is
// :latest.
func ParseReference(ref string) (orasreg.Reference, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return orasreg.Reference{}, fmt.Errorf("reference %q: %w: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	r, err := orasreg.ParseReference(named.String())
	if err != nil {
		return orasreg.Reference{}, fmt.Errorf("reference %q: %w: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	return r, nil
}

// Name is the repository's name with its registry, "host/repo".
func (r *Remote) Name() string { return r.Ref.Registry + "/" + r.Ref.Repository }

// String is the reference as given.
func (r *Remote) String() string { return r.Ref.String() }

// newHTTPClient is the client of a registry the host directory does not
// name.
func newHTTPClient(o Options) *http.Client {
	tr := newTransport(o, &tls.Config{InsecureSkipVerify: o.Insecure}) // the user asked for --insecure
	// The one layer that retries requests (see Resume).
	return &http.Client{Transport: retry.NewTransport(tr)}
}

// newTransport is the transport of every registry host, with its TLS.
func newTransport(o Options, tc *tls.Config) *http.Transport {
	conns := o.Connections
	if conns <= 0 {
		conns = 16
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 4 * conns
	tr.MaxIdleConnsPerHost = 2 * conns
	tr.ReadBufferSize = 256 << 10
	tr.WriteBufferSize = 256 << 10
	tr.DisableCompression = true
	tr.ResponseHeaderTimeout = 5 * time.Minute
	// One TCP connection per parallel transfer: HTTP/2 would multiplex them all
	// over one connection and one congestion window.
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	tr.TLSClientConfig = tc
	return tr
}

// maxManifestBytes bounds a manifest read (registries commonly cap at 4 MiB).
const maxManifestBytes = 4 << 20

// FetchManifest resolves the remote's reference and reads its manifest,
// verified against its digest.
func (r *Remote) FetchManifest(ctx context.Context) (ocispec.Descriptor, []byte, error) {
	c := docker.HostCapabilityResolve
	if _, err := r.Ref.Digest(); err == nil {
		c = docker.HostCapabilityPull
	}
	var desc ocispec.Descriptor
	var raw []byte
	err := r.try(ctx, c, "", func(h *host) error {
		d, rc, err := h.repo.FetchReference(ctx, r.Ref.ReferenceOrDefault())
		if err != nil {
			return fmt.Errorf("resolve %s: %w", r, Classify(err))
		}
		defer rc.Close()
		desc = d
		raw, err = readVerified(rc, desc, "manifest of "+r.String(), maxManifestBytes)
		return err
	})
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	return desc, raw, nil
}

// Head resolves the remote's reference with a manifest HEAD: the
// registry's answer to these credentials for this repository, with no
// payload.
func (r *Remote) Head(ctx context.Context) (ocispec.Descriptor, error) {
	c := docker.HostCapabilityResolve
	if _, err := r.Ref.Digest(); err == nil {
		c = docker.HostCapabilityPull
	}
	var desc ocispec.Descriptor
	err := r.try(ctx, c, "", func(h *host) error {
		d, err := h.repo.Resolve(ctx, r.Ref.ReferenceOrDefault())
		if err != nil {
			return fmt.Errorf("resolve %s: %w", r, Classify(err))
		}
		desc = d
		return nil
	})
	return desc, err
}

// FetchSmall reads a small blob, verified against its descriptor.
func (r *Remote) FetchSmall(ctx context.Context, desc ocispec.Descriptor, what string, limit int64) ([]byte, error) {
	if desc.Size > limit {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than the %d allowed: %w", r, what, desc.Size, limit, errdefs.ErrInvalidArgument)
	}
	var raw []byte
	err := r.try(ctx, docker.HostCapabilityPull, desc.Digest, func(h *host) error {
		rc, err := h.repo.Fetch(ctx, desc)
		if err != nil {
			return fmt.Errorf("fetch %s: %w", what, Classify(err))
		}
		defer rc.Close()
		raw, err = readVerified(rc, desc, what, limit)
		return err
	})
	return raw, err
}

// readVerified reads exactly desc.Size bytes and checks their digest.
func readVerified(r io.Reader, desc ocispec.Descriptor, what string, limit int64) ([]byte, error) {
	if desc.Size > limit || desc.Size < 0 {
		return nil, fmt.Errorf("%s: size %d out of bounds: %w", what, desc.Size, errdefs.ErrInvalidArgument)
	}
	raw, err := io.ReadAll(io.LimitReader(r, desc.Size+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(raw)) != desc.Size {
		return nil, DigestMismatch(what, fmt.Sprintf("%s (%d bytes)", desc.Digest, desc.Size),
			fmt.Sprintf("%s (%d bytes)", digest.FromBytes(raw), len(raw)))
	}
	if got := desc.Digest.Algorithm().FromBytes(raw); got != desc.Digest {
		return nil, DigestMismatch(what, desc.Digest.String(), got.String())
	}
	return raw, nil
}

// plainHTTPAnswer is how net/http says that a TLS handshake was answered in
// plain HTTP; it has no error value of its own to match.
const plainHTTPAnswer = "server gave HTTP response to HTTPS client"

// Classify maps registry errors onto errdefs classes.
func Classify(err error) error {
	var er *errcode.ErrorResponse
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return &remoteError{fmt.Errorf("%w (log in with docker, nerdctl or oras login)", err), errdefs.ErrUnauthenticated}
	case errors.Is(err, errdef.ErrNotFound):
		return &remoteError{err, errdefs.ErrNotFound}
	case isDialError(err):
		return &remoteError{fmt.Errorf("%w: the registry does not answer", err), errdefs.ErrUnavailable}
	case strings.Contains(err.Error(), plainHTTPAnswer):
		return &remoteError{fmt.Errorf("%w: the registry speaks plain HTTP (use --plain-http, or plain_http = true under [resolve] in the configuration file)", err), errdefs.ErrInvalidArgument}
	case errors.As(err, &er):
		switch er.StatusCode {
		case http.StatusNotFound:
			return &remoteError{err, errdefs.ErrNotFound}
		case http.StatusUnauthorized:
			return &remoteError{err, errdefs.ErrUnauthenticated}
		case http.StatusForbidden:
			return &remoteError{err, errdefs.ErrPermissionDenied}
		case http.StatusTooManyRequests:
			return &remoteError{err, errdefs.ErrUnavailable}
		}
		if er.StatusCode >= 500 {
			return &remoteError{err, errdefs.ErrUnavailable}
		}
	}
	return err
}

// isDialError says err is a failure to reach the registry at all: a refused
// or unreachable connection, or a name that does not resolve.
func isDialError(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns)
}

// DigestMismatch is the error of a blob whose bytes do not hash to its
// descriptor's digest (want): the registry, a proxy or the wire corrupted
// it. what names the blob: a layer's file path, "manifest of ...".
func DigestMismatch(what, want, got string) error {
	return fmt.Errorf("%s: digest mismatch: descriptor says %s, received bytes hash to %s: %w", what, want, got, errdefs.ErrDataLoss)
}

// remoteError is a registry error with its errdefs class; it reads as the
// registry's own message.
type remoteError struct {
	err   error
	class error
}

func (e *remoteError) Error() string   { return e.err.Error() }
func (e *remoteError) Unwrap() []error { return []error{e.err, e.class} }
