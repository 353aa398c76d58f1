package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// refusal stands in for package trust's Refusal.
type refusal struct{ scope string }

func (r refusal) Error() string      { return "trust policy scope " + r.scope + " refuses it" }
func (r refusal) TrustScope() string { return r.scope }
func (r refusal) Unwrap() error      { return errdefs.ErrPermissionDenied }

// switchedTrust is a trust policy a test tightens and relaxes: it refuses
// every store hit while refuse is set, and records the references asked.
type switchedTrust struct {
	refuse atomic.Bool
	mu     sync.Mutex
	asked  []string
}

func (s *switchedTrust) Hit(_ context.Context, _ *store.Domain, _ artifact.ID, ref string) error {
	s.mu.Lock()
	s.asked = append(s.asked, ref)
	s.mu.Unlock()
	if s.refuse.Load() {
		return refusal{"registry.test/models"}
	}
	return nil
}

// askedSince forgets the references asked so far, and returns them.
func (s *switchedTrust) askedSince() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	asked := s.asked
	s.asked = nil
	return asked
}

func (s *switchedTrust) Admit(context.Context, *store.Domain, artifact.ID, string, artifact.Producer) error {
	return nil
}

func (s *switchedTrust) Unsigned(string) error { return nil }

// TestMountAppliesTrustPolicy: a container's rootfs (Prepare) or an image
// volume (View) over a weight snapshot that exists already is made only
// while the trust policy, as it stands, accepts the artifact it links,
// asked under the pointer's artifact reference; a refusal names the weights
// and the scope, leaves no snapshot and takes no lease.
func TestMountAppliesTrustPolicy(t *testing.T) {
	ctx := context.Background()
	n, tr := newTrustedNode(t)
	id := n.importModel(t, 256<<10, 1)
	if _, err := n.sn.Prepare(ctx, "base-extract", ""); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Commit(ctx, chainID(1), "base-extract"); err != nil {
		t.Fatal(err)
	}
	labels := weightLabels(id, "/models/m", chainID(2))
	n.prepareWeights(t, "extract "+chainID(2), chainID(1), labels)
	ref := labels[pointer.LabelArtifact]

	for i, tc := range []struct {
		name   string
		refuse bool
		view   bool
	}{
		{"accepted: a container starts", false, false},
		{"tightened: a container is refused", true, false},
		{"tightened: an image volume is refused", true, true},
		{"relaxed: a container starts", false, false},
		{"relaxed: an image volume is made", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.refuse.Store(tc.refuse)
			tr.askedSince()
			key := fmt.Sprintf("container-%d", i)
			mk := n.sn.Prepare
			if tc.view {
				mk = n.sn.View
			}
			_, err := mk(ctx, key, chainID(2))
			if asked := tr.askedSince(); len(asked) != 1 || asked[0] != ref {
				t.Fatalf("the policy was asked for %q, want once for %q", asked, ref)
			}
			_, serr := n.sn.Stat(ctx, key)
			if !tc.refuse {
				if err != nil || serr != nil {
					t.Fatalf("made: %v, stat: %v", err, serr)
				}
				if err := n.sn.Remove(ctx, key); err != nil {
					t.Fatal(err)
				}
				return
			}
			var r interface{ TrustScope() string }
			if !errors.As(err, &r) || !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), id) ||
				!strings.Contains(err.Error(), "registry.test/models") {
				t.Fatalf("refused: %v, want the refusal naming the weights and the scope", err)
			}
			if !errdefs.IsNotFound(serr) {
				t.Fatalf("a refused %s left its snapshot: %v", key, serr)
			}
			if got := n.sn.leases.identities(); len(got) != 0 {
				t.Fatalf("a refused %s took leases: %v", key, got)
			}
		})
	}
	if _, err := n.sn.Stat(ctx, chainID(2)); err != nil {
		t.Fatalf("the weight snapshot after the refusals: %v", err)
	}
}

// TestHostMountAppliesTrustPolicy: weightsnap mount of a store artifact is
// refused while the trust policy refuses the store's copy, whether a
// resolution asks it (nothing holds the artifact) or the artifact is held
// already by a container; the CLI gets the refusal with its scope.
func TestHostMountAppliesTrustPolicy(t *testing.T) {
	ctx := context.Background()
	n, tr := newTrustedNode(t)
	id := n.importModel(t, 256<<10, 2)
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := control.Listen(ctx, sock, control.Services{Mounts: n.sn.HostMounts()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c := control.NewClient(sock)
	if _, err := n.sn.Prepare(ctx, "base-extract", ""); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Commit(ctx, chainID(1), "base-extract"); err != nil {
		t.Fatal(err)
	}
	n.prepareWeights(t, "extract "+chainID(2), chainID(1), weightLabels(id, "/models/m", chainID(2)))

	for _, tc := range []struct {
		name   string
		held   bool
		refuse bool
	}{
		{"tightened, not held", false, true},
		{"tightened, held by a container", true, true},
		{"relaxed, held by a container", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.refuse.Store(false)
			if tc.held {
				if _, err := n.sn.Prepare(ctx, "container", chainID(2)); err != nil {
					t.Fatal(err)
				}
				defer n.sn.Remove(ctx, "container")
			}
			tr.refuse.Store(tc.refuse)
			dir := filepath.Join(t.TempDir(), "m")
			_, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(id), Dir: dir})
			if !tc.refuse {
				if err != nil {
					t.Fatal(err)
				}
				if err := c.HostUnmount(ctx, dir); err != nil {
					t.Fatal(err)
				}
				return
			}
			var r *control.Refusal
			if !errors.As(err, &r) || r.TrustScope() != "registry.test/models" {
				t.Fatalf("mount: %v, want the daemon's refusal by registry.test/models", err)
			}
			if ms, _ := c.Mounts(ctx); len(ms) != 0 {
				t.Fatalf("a refused mount is listed: %+v", ms)
			}
		})
	}
}

// newTrustedNode is a node whose resolutions and mounts ask a switchedTrust
// the test turns.
func newTrustedNode(t *testing.T) (*node, *switchedTrust) {
	t.Helper()
	n := newNode(t, t.TempDir())
	tr := &switchedTrust{}
	rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: n.dom.Root(), Trust: tr})
	if err != nil {
		t.Fatal(err)
	}
	n.resolver.inner = rt
	return n, tr
}
