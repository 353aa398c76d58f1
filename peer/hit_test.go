package peer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// refusal stands in for package trust's Refusal.
type refusal struct{ reason string }

func (r refusal) Error() string      { return "trust policy scope \"default\" refuses it: " + r.reason }
func (r refusal) TrustScope() string { return "default" }
func (r refusal) Unwrap() error      { return errdefs.ErrPermissionDenied }

// TestFetchAppliesPolicyToStoreHit: a fetch of an identity the store holds
// already asks Hit; accepted, the store's artifact serves it and no peer is
// asked. Refused, the peer's manifest is read and Admit decides, as for an
// artifact the store lacks: refused again, the fetch fails with the
// refusal; accepted, the store's artifact serves it and no payload byte is
// fetched again.
func TestFetchAppliesPolicyToStoreHit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, src := storetest.Checkpoint(t, 256<<10, 1)
	sender := storetest.Open(t)
	id := storetest.Seed(t, sender, src)
	srv, addr := serve(t, sender, ServerConfig{})
	digest := mustID(t, id)
	for _, tc := range []struct {
		name           string
		hit, admit     error
		wantAdmitAsked bool
		wantErr        bool
	}{
		{"hit accepted", nil, nil, false, false},
		{"hit refused, admitted", refusal{"the store holds it unverified"}, nil, true, false},
		{"hit refused, refused", refusal{"the store holds it unverified"}, refusal{"this source carries no signature"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := storetest.Open(t)
			storetest.Seed(t, d, src)
			var hitAsked, admitAsked []artifact.ID
			o := FetchOptions{
				Hit: func(_ context.Context, id artifact.ID) error {
					hitAsked = append(hitAsked, id)
					return tc.hit
				},
				Admit: func(_ context.Context, id artifact.ID, _ artifact.Producer) error {
					admitAsked = append(admitAsked, id)
					return tc.admit
				},
			}
			l, rep, err := Fetch(ctx, d, []string{addr}, digest.String(), o)
			waitSessionsEnd(t, srv, digest)
			if fmt.Sprint(hitAsked) != fmt.Sprint([]artifact.ID{digest}) {
				t.Fatalf("Hit asked for %v, want %s once", hitAsked, digest)
			}
			if (len(admitAsked) > 0) != tc.wantAdmitAsked {
				t.Fatalf("Admit asked for %v, want asked %v", admitAsked, tc.wantAdmitAsked)
			}
			if tc.wantErr {
				var r interface{ TrustScope() string }
				if !errors.As(err, &r) || !strings.Contains(err.Error(), "this source carries no signature") {
					t.Fatalf("fetch: %v, want the peer's refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if l.ID != digest || rep.Built || rep.Fetched != 0 {
				t.Fatalf("fetch: %s, built %v, fetched %d: want the store's artifact, no byte fetched", l.ID, rep.Built, rep.Fetched)
			}
		})
	}
}
