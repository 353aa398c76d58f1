package cri

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/oci/registry"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// Access checks that the registry accepts a pull's own credentials for a repository.
//
// It asks before the pull is answered from what the node holds, with a
// manifest HEAD and no payload. The credentials are registry.WithCredential's,
// else the node's Docker config's. A positive answer is kept for its
// lifetime per credential and repository. Its key is an HMAC of both with a
// key of this process's alone, so the secret is neither a key nor kept. A
// refusal is never kept. Nothing is written or logged.
type Access struct {
	ttl time.Duration
	now func() time.Time
	key []byte

	mu sync.Mutex
	ok map[[sha256.Size]byte]time.Time // accepted until
}

// NewAccess returns a check that keeps each positive answer for ttl.
// With ttl 0 none is kept, and every pull asks the registry.
func NewAccess(ttl time.Duration) (*Access, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("credential check lifetime %s: %w", ttl, errdefs.ErrInvalidArgument)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("credential check key: %w", err)
	}
	return &Access{ttl: ttl, now: time.Now, key: key, ok: map[[sha256.Size]byte]time.Time{}}, nil
}

// Check asks the registry whether the credentials of ctx may read r's reference.
// It is nil when the registry answers the manifest.
// Otherwise it is the registry's answer, classified with errdefs.
func (a *Access) Check(ctx context.Context, r *registry.Remote) error {
	k := a.keyOf(ctx, r)
	now := a.now()
	a.mu.Lock()
	for e, until := range a.ok {
		if !now.Before(until) {
			delete(a.ok, e)
		}
	}
	_, cached := a.ok[k]
	a.mu.Unlock()
	if cached {
		return nil
	}
	if _, err := r.Head(ctx); err != nil {
		return err
	}
	if a.ttl > 0 {
		a.mu.Lock()
		a.ok[k] = now.Add(a.ttl)
		a.mu.Unlock()
	}
	return nil
}

// Len is the number of positive answers kept.
// Expired ones count until the next Check drops them.
func (a *Access) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ok)
}

// keyOf is the HMAC of the credential ctx gives r's host (or the node's
// marker when it gives none) and r's registry and repository, each field
// length-prefixed.
func (a *Access) keyOf(ctx context.Context, r *registry.Remote) [sha256.Size]byte {
	m := hmac.New(sha256.New, a.key)
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	field(strings.ToLower(r.Ref.Registry))
	field(r.Ref.Repository)
	if c, ok := registry.CredentialOf(ctx, r.Ref.Registry); ok {
		field("pull")
		field(c.Username)
		field(c.Password)
		field(c.RefreshToken)
		field(c.AccessToken)
	} else {
		field("node")
	}
	var k [sha256.Size]byte
	copy(k[:], m.Sum(nil))
	return k
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
