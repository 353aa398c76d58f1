package peer

import (
	"context"
	"fmt"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
)

// BenchmarkFetchSHA256Check: a fetch over loopback TCP as it is, and with
// the sha256 check a kept signature record asks for (every file read back
// once whole): what trusting a signature costs a peer fetch.
func BenchmarkFetchSHA256Check(b *testing.B) {
	src, id := storetest.Seeded(b, 256<<20, 4)
	_, addr := serve(b, src, ServerConfig{})
	digest := digestOf(b, id)
	for _, check := range []bool{false, true} {
		b.Run(fmt.Sprint("checked=", check), func(b *testing.B) {
			var total int64
			for b.Loop() {
				l, rep, err := Fetch(context.Background(), storetest.Open(b), []string{addr}, digest, admitting(check))
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
				total = rep.Bytes
			}
			b.SetBytes(total)
		})
	}
}

// BenchmarkFetchWithDeadPeer: a fetch with a black-holed peer listed
// before the holder, once the first fetch has remembered it, against a
// fetch with the holder alone; each by the full identity and by a
// 12-digit prefix (looked up in the peers' listings first); and a first
// fetch, which meets the dead peer. The default connect timeout applies,
// so a dead peer that is not passed over costs seconds.
func BenchmarkFetchWithDeadPeer(b *testing.B) {
	src, id := storetest.Seeded(b, 4<<20, 1)
	_, holder := serve(b, src, ServerConfig{})
	hole := testenv.BlackHole(b)
	digest := digestOf(b, id)
	for _, tc := range []struct {
		name   string
		peers  []string
		prefix bool
		first  bool // every fetch is a first one: nothing remembered, as a CLI's
	}{
		{"live", []string{holder}, false, false},
		{"dead+live", []string{hole, holder}, false, false},
		{"prefix/live", []string{holder}, true, false},
		{"prefix/dead+live", []string{hole, holder}, true, false},
		{"first/dead+live", []string{hole, holder}, false, true},
		{"first/prefix/dead+live", []string{hole, holder}, true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := FetchOptions{Client: ClientConfig{Down: NewDownPeers()}}
			fetch := func() {
				if tc.first {
					o.Client.Down = NewDownPeers()
				}
				req := digest
				if tc.prefix {
					var err error
					if req, err = o.Client.LookupPrefix(context.Background(), tc.peers, digest[len("sha256:"):][:12]); err != nil {
						b.Fatal(err)
					}
				}
				l, _, err := Fetch(context.Background(), storetest.Open(b), tc.peers, req, o)
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
			fetch() // the first fetch, which meets the dead peer
			for b.Loop() {
				fetch()
			}
		})
	}
}
