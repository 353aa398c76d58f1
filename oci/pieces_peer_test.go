package oci

import (
	"cmp"
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/store"
)

// TestPullServesPiecesToPeers: a root pulling an artifact with its pieces
// layer, from a registry that holds the stream inside a long tensor's
// third piece, serves that tensor's first piece to a peer before the
// tensor is whole; once the registry goes on, both publish the source's
// bytes.
func TestPullServesPiecesToPeers(t *testing.T) {
	ctx := context.Background()
	l, us := piecesSource(t)
	u := slices.MaxFunc(us, func(a, b pieceUnit) int { return cmp.Compare(a.n, b.n) })
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "models/x:v1")
	if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	// The bytes a peer can verify while the registry holds: the files
	// before u's (a pull streams them one at a time, in path order), and
	// u's file up to u.
	var before int64
	var victim digest.Digest
	for _, fe := range l.Index.Files {
		switch {
		case fe.Path < u.path:
			before += fe.Size
		case fe.Path == u.path:
			victim = digest.NewDigestFromEncoded(digest.SHA256, fe.SHA256)
		}
	}
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	f.setHold(func(d digest.Digest) (int64, <-chan struct{}) {
		if d == victim {
			return u.off + 2*blake3.PieceSize + 100, release
		}
		return -1, nil
	})

	root := storetest.Open(t)
	addr := servePeer(t, root)
	pulled := make(chan error, 1)
	go func() {
		got, _, err := Pull(ctx, root, r, PullOptions{})
		if err == nil {
			got.Close()
		}
		pulled <- err
	}()
	// A fetch takes the root only once it announced its build.
	testenv.Eventually(t, 20*time.Second, func() bool {
		ls, _ := (peer.ClientConfig{}).List(ctx, addr)
		return ls != nil && len(ls.Artifacts) == 1
	}, "the root never listed its build")
	child := storetest.Open(t)
	var moved atomic.Int64
	type result struct {
		l   *store.Lease
		err error
	}
	fetched := make(chan result, 1)
	go func() {
		got, _, err := peer.Fetch(ctx, child, []string{addr}, l.ID.String(), peer.FetchOptions{Progress: func(n int64) { moved.Add(n) }})
		fetched <- result{got, err}
	}()
	want := before + u.off + blake3.PieceSize
	testenv.Eventually(t, 20*time.Second, func() bool { return moved.Load() >= want },
		"the peer never verified %d bytes (%s's first piece) while the registry held the root's pull", want, u.what())
	close(release)
	if err := <-pulled; err != nil {
		t.Fatal(err)
	}
	res := <-fetched
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.l.Close()
	sameArtifact(t, child, res.l, l)
}

// servePeer serves d to weight peers until the test ends, and returns its
// address once d's builds announce their progress.
func servePeer(t *testing.T, d *store.Domain) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := peer.NewServer(d, peer.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })
	// The server takes the store's serve lock before it answers a listing.
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := (peer.ClientConfig{}).List(ctx, ln.Addr().String())
		return err == nil
	}, "the peer server never answered")
	return ln.Addr().String()
}
