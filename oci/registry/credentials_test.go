package registry

import (
	"context"
	"testing"

	orasreg "oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// TestCredentialHook: Options.Credentials is asked first, for the
// repository a request is scoped to ("" for none), and a miss leaves the
// Docker config (none here: anonymous).
func TestCredentialHook(t *testing.T) {
	type ask struct{ host, repo string }
	var asked []ask
	hook := func(_ context.Context, host, repo string) (auth.Credential, bool) {
		asked = append(asked, ask{host, repo})
		return auth.Credential{Username: "u", Password: "p"}, repo == "models/a"
	}
	f := credential(hook, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		repo string // the request's scope; "" for none
		want string // the username answered
	}{{"models/a", "u"}, {"models/b", ""}, {"", ""}} {
		rctx := ctx
		if tc.repo != "" {
			rctx = auth.AppendRepositoryScope(ctx, orasreg.Reference{Registry: "reg:5000", Repository: tc.repo}, auth.ActionPull)
		}
		if c, err := f(rctx, "reg:5000"); err != nil || c.Username != tc.want {
			t.Errorf("request scoped to %q: %+v %v, want user %q", tc.repo, c, err, tc.want)
		}
	}
	if want := []ask{{"reg:5000", "models/a"}, {"reg:5000", "models/b"}, {"reg:5000", ""}}; len(asked) != 3 || asked[0] != want[0] || asked[1] != want[1] || asked[2] != want[2] {
		t.Fatalf("asked %v, want %v", asked, want)
	}
}
