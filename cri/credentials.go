package cri

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// DefaultCredentialLifetime is how long a pull's credentials are kept.
const DefaultCredentialLifetime = time.Hour

// Credentials are the pull credentials that CRI PullImage requests brought,
// in memory only, per registry host and repository, each dropped once its
// lifetime has passed. A weight layer's artifact is fetched with the
// credentials of its own repository, else of another repository of its
// registry (the most recent), as containerd's resolver scopes the
// credentials of a pull; Lookup is registry.Options.Credentials. No
// credential is ever logged, written or put in an error.
type Credentials struct {
	lifetime time.Duration
	now      func() time.Time

	mu      sync.Mutex
	entries map[credentialKey]credentialEntry
}

type credentialKey struct{ host, repository string }

type credentialEntry struct {
	cred    auth.Credential
	added   time.Time
	expires time.Time
}

// NewCredentials returns an empty cache keeping each credential for
// lifetime (DefaultCredentialLifetime when 0).
func NewCredentials(lifetime time.Duration) *Credentials {
	if lifetime <= 0 {
		lifetime = DefaultCredentialLifetime
	}
	return &Credentials{lifetime: lifetime, now: time.Now, entries: map[credentialKey]credentialEntry{}}
}

// Put keeps cred for repository of host, replacing what was kept there.
func (c *Credentials) Put(host, repository string, cred auth.Credential) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.dropExpired(now)
	c.entries[credentialKey{host, repository}] = credentialEntry{cred: cred, added: now, expires: now.Add(c.lifetime)}
}

// Forget drops the credential of repository of host if it is still cred
// (a pull that failed with it).
func (c *Credentials) Forget(host, repository string, cred auth.Credential) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := credentialKey{host, repository}
	if e, ok := c.entries[k]; ok && e.cred == cred {
		delete(c.entries, k)
	}
}

// Lookup is the credential for repository of host: its own, else the most
// recent of another repository of host; none when neither is kept or
// unexpired.
func (c *Credentials) Lookup(_ context.Context, host, repository string) (auth.Credential, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropExpired(c.now())
	if e, ok := c.entries[credentialKey{host, repository}]; ok {
		return e.cred, true
	}
	var best credentialEntry
	found := false
	for k, e := range c.entries {
		if k.host == host && (!found || e.added.After(best.added)) {
			best, found = e, true
		}
	}
	return best.cred, found
}

// Len is the number of credentials kept (expired ones dropped first).
func (c *Credentials) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropExpired(c.now())
	return len(c.entries)
}

func (c *Credentials) dropExpired(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
		}
	}
}

// credentialOf reads a CRI AuthConfig: username and password, or "auth"
// (base64 of user:password), an identity token (a refresh token) or a
// registry token (a bearer access token). ok is false for an empty one. The
// error never quotes the secret.
func credentialOf(a *runtime.AuthConfig) (cred auth.Credential, ok bool, err error) {
	if a == nil {
		return auth.EmptyCredential, false, nil
	}
	cred = auth.Credential{Username: a.GetUsername(), Password: a.GetPassword(),
		RefreshToken: a.GetIdentityToken(), AccessToken: a.GetRegistryToken()}
	if a.GetAuth() != "" && cred.Username == "" && cred.Password == "" {
		raw, err := base64.StdEncoding.DecodeString(a.GetAuth())
		if err != nil {
			return auth.EmptyCredential, false, fmt.Errorf("pull credentials: auth is not base64: %w", errdefs.ErrInvalidArgument)
		}
		user, pass, found := strings.Cut(string(raw), ":")
		if !found {
			return auth.EmptyCredential, false, fmt.Errorf("pull credentials: auth is not user:password: %w", errdefs.ErrInvalidArgument)
		}
		cred.Username, cred.Password = user, pass
	}
	return cred, cred != auth.EmptyCredential, nil
}
