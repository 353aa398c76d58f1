package registry

import (
	"context"
	"strings"

	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// pullCredential is the credential one request (a CRI pull) brought for a
// registry host, with the token cache of that request alone.
type pullCredential struct {
	host  string
	cred  auth.Credential
	cache auth.Cache
}

type pullCredentialKey struct{}

// WithCredential makes cred the credential of every request to host made
// under ctx, in place of the Docker config's, with a token cache of its own
// (no token got with it serves a request without it, nor the other way);
// requests to other hosts keep the Docker config's. It is how a CRI pull's
// own credentials reach its registry requests and nothing else: they live
// in ctx, in memory only.
func WithCredential(ctx context.Context, host string, cred auth.Credential) context.Context {
	return context.WithValue(ctx, pullCredentialKey{}, &pullCredential{host: host, cred: cred, cache: auth.NewCache()})
}

// CredentialOf is the credential WithCredential gave requests to host
// under ctx; ok is false when they use the Docker config's.
func CredentialOf(ctx context.Context, host string) (auth.Credential, bool) {
	if p := pullCredentialOf(ctx); p != nil && strings.EqualFold(p.host, host) {
		return p.cred, true
	}
	return auth.EmptyCredential, false
}

func pullCredentialOf(ctx context.Context) *pullCredential {
	p, _ := ctx.Value(pullCredentialKey{}).(*pullCredential)
	return p
}

// credential is the credential function of a registry's clients: the
// request's own (WithCredential) for its host, else the Docker config's
// store (nil when it could not be read: anonymous).
func credential(store credentials.Store) auth.CredentialFunc {
	var docker auth.CredentialFunc
	if store != nil {
		docker = credentials.Credential(store)
	}
	return func(ctx context.Context, hostport string) (auth.Credential, error) {
		if c, ok := CredentialOf(ctx, hostport); ok {
			return c, nil
		}
		if docker == nil {
			return auth.EmptyCredential, nil
		}
		return docker(ctx, hostport)
	}
}

// tokenCache is a connector's token cache: the Docker config's tokens are
// kept for every request without a credential of its own, and a request
// with one (WithCredential) uses that credential's cache alone.
type tokenCache struct{ node auth.Cache }

func (c tokenCache) of(ctx context.Context) auth.Cache {
	if p := pullCredentialOf(ctx); p != nil {
		return p.cache
	}
	return c.node
}

func (c tokenCache) GetScheme(ctx context.Context, registry string) (auth.Scheme, error) {
	return c.of(ctx).GetScheme(ctx, registry)
}

func (c tokenCache) GetToken(ctx context.Context, registry string, scheme auth.Scheme, key string) (string, error) {
	return c.of(ctx).GetToken(ctx, registry, scheme, key)
}

func (c tokenCache) Set(ctx context.Context, registry string, scheme auth.Scheme, key string, fetch func(context.Context) (string, error)) (string, error) {
	return c.of(ctx).Set(ctx, registry, scheme, key, fetch)
}
