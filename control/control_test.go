package control

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// fakeMounts records the calls the server makes and answers err when set.
type fakeMounts struct {
	mu       sync.Mutex
	err      error
	mounted  []HostMountRequest
	unmounts []string
}

func (b *fakeMounts) Mount(_ context.Context, req HostMountRequest) (*HostMountInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	b.mounted = append(b.mounted, req)
	return &HostMountInfo{Dir: req.Dir, ID: req.ID, Artifact: req.Artifact, Created: time.Unix(1, 0).UTC(), Leased: true}, nil
}

func (b *fakeMounts) Unmount(_ context.Context, dir string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unmounts = append(b.unmounts, dir)
	return b.err
}

func (b *fakeMounts) List() []HostMountInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []HostMountInfo
	for _, r := range b.mounted {
		out = append(out, HostMountInfo{Dir: r.Dir, ID: r.ID})
	}
	return out
}

func (b *fakeMounts) HoldersOf(id artifact.ID) (*Holders, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &Holders{ID: id, Leased: true, Mounts: []string{"/models/m"}, Pending: []string{"container"}}, b.err
}

func (b *fakeMounts) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

// serve starts the control API over svc on a socket of its own.
func serve(t *testing.T, svc Services) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := Listen(context.Background(), sock, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return NewClient(sock)
}

// repeatsClass says whether an error message names its class twice.
func repeatsClass(err error) bool {
	for _, cls := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable} {
		if strings.Contains(err.Error(), cls.Error()+": "+cls.Error()) {
			return true
		}
	}
	return false
}

// TestRoundTrip: every call reaches the backend with what the client sent
// and comes back as the backend answered.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	b := &fakeMounts{}
	c := serve(t, Services{Mounts: b})
	id := artifact.MustParseID("sha256:" + strings.Repeat("ab", 32))
	req := HostMountRequest{ID: id, Artifact: "reg.example/m@sha256:" + strings.Repeat("cd", 32), Dir: "/models/a b&c"}
	mi, err := c.HostMount(ctx, req)
	if err != nil || mi.Dir != req.Dir || mi.ID != id || mi.Artifact != req.Artifact || !mi.Leased || !mi.Created.Equal(time.Unix(1, 0)) {
		t.Fatalf("mount: %+v %v", mi, err)
	}
	if ms, err := c.Mounts(ctx); err != nil || len(ms) != 1 || ms[0].Dir != req.Dir {
		t.Fatalf("mounts: %+v %v", ms, err)
	}
	if err := c.HostUnmount(ctx, req.Dir); err != nil || !slices.Equal(b.unmounts, []string{req.Dir}) {
		t.Fatalf("unmount: %v, the backend saw %q", err, b.unmounts)
	}
	h, err := c.Holders(ctx, id)
	if err != nil || h.ID != id || !h.Leased || !slices.Equal(h.Mounts, []string{"/models/m"}) || !slices.Equal(h.Pending, []string{"container"}) {
		t.Fatalf("holders: %+v %v", h, err)
	}
}

// TestErrorsKeepTheirClass: a refused request and a backend's failure
// reach the client with their errdefs class, named once.
func TestErrorsKeepTheirClass(t *testing.T) {
	ctx := context.Background()
	b := &fakeMounts{}
	c := serve(t, Services{Mounts: b})
	for _, tc := range []struct {
		name string
		call func() error
		is   func(error) bool
		says string // what the message must name
	}{
		{"malformed identity", func() error {
			bad := map[string]string{"identity": "sha256:12", "dir": "/models/m"}
			return c.call(ctx, http.MethodPost, "/v1/mounts", bad, &HostMountInfo{})
		}, errdefs.IsInvalidArgument, "sha256:12"},
		{"unknown field", func() error {
			bad := map[string]string{"identity": "sha256:" + strings.Repeat("ab", 32), "dir": "/m", "mode": "rw"}
			return c.call(ctx, http.MethodPost, "/v1/mounts", bad, &HostMountInfo{})
		}, errdefs.IsInvalidArgument, "mode"},
		{"holders of a malformed identity", func() error {
			return c.call(ctx, http.MethodGet, "/v1/holders?identity=nope", nil, &Holders{})
		}, errdefs.IsInvalidArgument, "nope"},
		{"backend refuses", func() error {
			b.fail(fmt.Errorf("/models/m is not a weightsnap host mount: %w", errdefs.ErrNotFound))
			defer b.fail(nil)
			return c.HostUnmount(ctx, "/models/m")
		}, errdefs.IsNotFound, "is not a weightsnap host mount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !tc.is(err) || repeatsClass(err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v", err)
			}
		})
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mounted) != 0 {
		t.Fatalf("refused requests reached the backend: %+v", b.mounted)
	}
}

// TestDaemonRoutes: the prefetch and publish routes answer what the
// daemon's services answer, and a daemon without them answers an empty
// list and refuses a publication as not implemented.
func TestDaemonRoutes(t *testing.T) {
	ctx := context.Background()
	id := artifact.MustParseID("sha256:" + strings.Repeat("ab", 32))
	req := PublishRequest{Kind: KindCompileCache, Dir: "/cache", For: id, Engine: "e"}
	var got PublishRequest
	full := serve(t, Services{Mounts: &fakeMounts{},
		Prefetch: func() any { return []map[string]string{{"file": "a.json"}} },
		Publish: func(_ context.Context, r PublishRequest) (*PublishResult, error) {
			got = r
			return &PublishResult{ID: id, Present: true}, nil
		}})
	bare := serve(t, Services{Mounts: &fakeMounts{}})
	for _, tc := range []struct {
		name    string
		c       *Client
		entries int
		publish func(*PublishResult, error) bool
	}{
		{"daemon's services", full, 1, func(res *PublishResult, err error) bool {
			return err == nil && res.ID == id && res.Present && got.Dir == req.Dir && got.For == id
		}},
		{"none", bare, 0, func(_ *PublishResult, err error) bool { return errdefs.IsNotImplemented(err) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var list []map[string]string
			if err := tc.c.Prefetch(ctx, &list); err != nil || len(list) != tc.entries {
				t.Fatalf("prefetch: %v %v, want %d entries", list, err, tc.entries)
			}
			if res, err := tc.c.Publish(ctx, req); !tc.publish(res, err) {
				t.Fatalf("publish: %+v %v", res, err)
			}
		})
	}
}

// TestNoDaemon: a socket nobody serves is errdefs.ErrUnavailable, naming
// the socket.
func TestNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := NewClient(sock).Mounts(context.Background())
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("got %v", err)
	}
}

// TestEvictionRoutes: the store, use and evict routes answer what the
// daemon's services answer, the eviction request arriving as sent; a
// daemon without them refuses each as not implemented.
func TestEvictionRoutes(t *testing.T) {
	ctx := context.Background()
	to := int64(600 << 20)
	var got []EvictRequest
	full := serve(t, Services{Mounts: &fakeMounts{},
		Store: func() StoreInfo { return StoreInfo{Root: "/var/lib/weightsnap"} },
		Use:   func(context.Context) (any, error) { return []map[string]int64{{"bytes": 1}}, nil },
		Evict: func(_ context.Context, r EvictRequest) (any, error) {
			got = append(got, r)
			return map[string]bool{"dry_run": r.DryRun}, nil
		}})
	bare := serve(t, Services{Mounts: &fakeMounts{}})
	for _, tc := range []struct {
		name string
		c    *Client
		ok   bool
	}{
		{"daemon's services", full, true},
		{"none", bare, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			si, err := tc.c.Store(ctx)
			if tc.ok != (err == nil) || (!tc.ok && !errdefs.IsNotImplemented(err)) || (tc.ok && si.Root != "/var/lib/weightsnap") {
				t.Fatalf("store: %+v %v", si, err)
			}
			var use []map[string]int64
			if err := tc.c.Use(ctx, &use); tc.ok != (err == nil) || (!tc.ok && !errdefs.IsNotImplemented(err)) || (tc.ok && len(use) != 1) {
				t.Fatalf("use: %v %v", use, err)
			}
			for _, req := range []EvictRequest{{To: &to, DryRun: true}, {}} {
				var rep map[string]bool
				err := tc.c.Evict(ctx, req, &rep)
				if tc.ok != (err == nil) || (!tc.ok && !errdefs.IsNotImplemented(err)) || (tc.ok && rep["dry_run"] != req.DryRun) {
					t.Fatalf("evict %+v: %v %v", req, rep, err)
				}
			}
		})
	}
	if len(got) != 2 || got[0].To == nil || *got[0].To != to || !got[0].DryRun || got[1].To != nil || got[1].DryRun {
		t.Fatalf("the daemon got %+v", got)
	}
}
