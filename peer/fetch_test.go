package peer

import (
	"context"
	"fmt"
	"testing"
)

func TestFetchTCP(t *testing.T) {
	src, id := seeded(t, 48<<20, 3)
	_, addr := serve(t, src, ServerConfig{})
	for _, rails := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(rails), func(t *testing.T) {
			dst := openStore(t)
			l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Rails: rails})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if !rep.Built || rep.Rails != rails || rep.Mode != ModeTCP || rep.Peer != addr || rep.Fetched != rep.Bytes {
				t.Fatalf("report %+v", rep)
			}
			verifyFull(t, dst, l.ID)
		})
	}
}
