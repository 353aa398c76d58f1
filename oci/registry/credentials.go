package registry

import (
	"context"
	"strings"

	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// CredentialFunc gives the credential of a repository ("models/llama") of a
// registry host ("host[:port]"), when it has one: Options.Credentials.
type CredentialFunc func(ctx context.Context, host, repository string) (auth.Credential, bool)

// credential is the credential function of a registry's clients: opts (the
// CRI's pull credentials) first, for the repository a request is scoped to
// ("" for a request scoped to none), then the Docker config's store (nil
// when it could not be read).
func credential(opts CredentialFunc, store credentials.Store) auth.CredentialFunc {
	var docker auth.CredentialFunc
	if store != nil {
		docker = credentials.Credential(store)
	}
	return func(ctx context.Context, hostport string) (auth.Credential, error) {
		if opts != nil {
			if c, ok := opts(ctx, hostport, scopedRepository(ctx, hostport)); ok {
				return c, nil
			}
		}
		if docker == nil {
			return auth.EmptyCredential, nil
		}
		return docker(ctx, hostport)
	}
}

// scopedRepository is the repository a request to host is scoped to
// ("repository:NAME:ACTIONS", as oras-go scopes every repository request),
// else "".
func scopedRepository(ctx context.Context, host string) string {
	for _, s := range auth.GetAllScopesForHost(ctx, host) {
		if rest, ok := strings.CutPrefix(s, "repository:"); ok {
			if i := strings.LastIndexByte(rest, ':'); i > 0 {
				return rest[:i]
			}
		}
	}
	return ""
}
