//go:build libfabric

package peer

import (
	"context"
	"testing"
)

func TestFetchRMA(t *testing.T) {
	src, id := seeded(t, 48<<20, 3)
	_, addr := serve(t, src, ServerConfig{Provider: "sockets"})
	dst := openStore(t)
	l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{Mode: ModeRMA, Rails: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !rep.Built || rep.Mode != ModeRMA || rep.Rails != 2 || rep.Fetched != rep.Bytes {
		t.Fatalf("report %+v", rep)
	}
	verifyFull(t, dst, l.ID)
}
