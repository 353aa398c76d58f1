package peer

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestProviderCarriesSignatures: the manifest of a peer's artifact
// carries the signature records its store keeps (none when it keeps
// none), with the identity and files the fetch verifies; the receiver's
// trust gate checks them (oci.Gate.Admit).
func TestProviderCarriesSignatures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, id := storetest.Seeded(t, 256<<10, 1)
	srv, addr := serve(t, d, ServerConfig{})
	digest, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Peers: []string{addr}, Options: FetchOptions{Client: ClientConfig{Timeout: time.Minute}}}
	carried := func() ([]byte, []string) {
		prod, err := p.Producer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		raw, got, files := prod.(*fetcher).CarriedSignatures()
		if g, _ := got.ID(); g != digest {
			t.Fatalf("carried identity %s, want %s", g, digest)
		}
		var sums []string
		for _, f := range files {
			sums = append(sums, f.SHA256)
		}
		return raw, sums
	}
	raw, sums := carried()
	waitSessionsEnd(t, srv, digest)
	if raw != nil {
		t.Fatalf("records sent for an artifact without any: %q", raw)
	}
	l, err := d.Lookup(ctx, digest, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, e := range l.Index.Files {
		if sums[i] != e.SHA256 {
			t.Fatalf("file %d: sha256 %s, want %s", i, sums[i], e.SHA256)
		}
	}
	rec := []byte(`{"schema":1,"records":[]}`)
	if err := d.EditSignatures(ctx, digest, func([]byte) ([]byte, error) { return rec, nil }); err != nil {
		t.Fatal(err)
	}
	if raw, _ := carried(); !bytes.Equal(raw, rec) {
		t.Fatalf("records sent %q, want the store's %q", raw, rec)
	}
}
