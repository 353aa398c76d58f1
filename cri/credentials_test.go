package cri

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// TestCredentialsScope: a repository's own credential first, else the
// newest of its registry, never another registry's; each dropped once its
// lifetime has passed; Forget drops only the credential it names.
func TestCredentialsScope(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCredentials(time.Hour)
	c.now = func() time.Time { return now }
	a := auth.Credential{Username: "a", Password: "pa"}
	b := auth.Credential{Username: "b", Password: "pb"}
	c.Put("reg:5000", "models/a", a)
	now = now.Add(time.Minute)
	c.Put("reg:5000", "models/b", b)
	ctx := context.Background()
	for _, tc := range []struct {
		host, repo string
		want       auth.Credential
		ok         bool
	}{
		{"reg:5000", "models/a", a, true},
		{"reg:5000", "models/b", b, true},
		{"reg:5000", "models/c", b, true}, // same registry: the newest
		{"other:5000", "models/a", auth.EmptyCredential, false},
	} {
		got, ok := c.Lookup(ctx, tc.host, tc.repo)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Lookup(%s, %s) = %v %v, want %v %v", tc.host, tc.repo, got.Username, ok, tc.want.Username, tc.ok)
		}
	}
	c.Forget("reg:5000", "models/a", b) // not the one kept
	if _, ok := c.Lookup(ctx, "reg:5000", "models/a"); !ok {
		t.Fatal("Forget of another credential dropped models/a's")
	}
	now = now.Add(time.Hour - time.Minute) // models/a's lifetime is over, models/b's not
	if got, _ := c.Lookup(ctx, "reg:5000", "models/a"); got != b {
		t.Fatalf("after models/a's expiry, Lookup gives %q, want the registry's other credential", got.Username)
	}
	if c.Len() != 1 {
		t.Fatalf("%d credentials kept, want 1", c.Len())
	}
	now = now.Add(time.Minute)
	if _, ok := c.Lookup(ctx, "reg:5000", "models/b"); ok || c.Len() != 0 {
		t.Fatal("an expired credential is still given")
	}
	c.Put("reg:5000", "models/a", a)
	c.Forget("reg:5000", "models/a", a)
	if c.Len() != 0 {
		t.Fatal("Forget kept the credential")
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
