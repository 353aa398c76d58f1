package peer

import (
	"context"
	"fmt"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
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
