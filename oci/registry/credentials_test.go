package registry

import (
	"context"
	"testing"

	orasreg "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// TestCredentialHook: Options.Credentials is asked first, for the
// repository a request is scoped to (else the client's own), and a miss
// leaves the Docker config (none here: anonymous).
func TestCredentialHook(t *testing.T) {
	type ask struct{ host, repo string }
	var asked []ask
	hook := func(_ context.Context, host, repo string) (auth.Credential, bool) {
		asked = append(asked, ask{host, repo})
		return auth.Credential{Username: "u", Password: "p"}, repo == "models/a"
	}
	f := credential(hook, "models/a", nil)
	ctx := context.Background()
	if c, err := f(ctx, "reg:5000"); err != nil || c.Username != "u" {
		t.Fatalf("unscoped request: %+v %v, want the client repository's credential", c, err)
	}
	scoped := auth.AppendRepositoryScope(ctx, orasreg.Reference{Registry: "reg:5000", Repository: "models/b"}, auth.ActionPull)
	if c, err := f(scoped, "reg:5000"); err != nil || c != auth.EmptyCredential {
		t.Fatalf("request scoped to models/b: %+v %v, want none", c, err)
	}
	if want := []ask{{"reg:5000", "models/a"}, {"reg:5000", "models/b"}}; len(asked) != 2 || asked[0] != want[0] || asked[1] != want[1] {
		t.Fatalf("asked %v, want %v", asked, want)
	}
}
