package peer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// BenchmarkJoin measures what a node's join costs the control plane over
// loopback TCP: a hello answered (a listing of a peer that holds one
// artifact), a session opened and closed (the request, the manifest), and
// one listing round over n peers (the chain's selection lists every peer
// at once). The fleet model takes these as its control-plane costs.
func BenchmarkJoin(b *testing.B) {
	src, identity := storetest.Seeded(b, 4<<20, 1)
	_, addr := serve(b, src, ServerConfig{MaxChildren: 1 << 20, MaxSessions: 1 << 20})
	id, err := identity.ID()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cfg := ClientConfig{}.withDefaults()
	b.Run("hello", func(b *testing.B) {
		for b.Loop() {
			if _, err := cfg.List(ctx, addr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			cs, err := openSession(ctx, cfg, addr, wire.Request{ID: id})
			if err != nil {
				b.Fatal(err)
			}
			cs.close()
		}
	})
	for _, n := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprint("list/peers=", n), func(b *testing.B) {
			addrs := slices.Repeat([]string{addr}, n)
			for b.Loop() {
				if offers, _ := listSources(ctx, cfg, addrs, id, false); !listedAll(offers) {
					b.Fatalf("a listing round of %d peers missed one", n)
				}
			}
		})
	}
}

// listedAll says whether every peer of a listing round offered the artifact.
func listedAll(offers []*source) bool {
	return !slices.Contains(offers, nil)
}
