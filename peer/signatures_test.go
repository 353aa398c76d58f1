package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
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
		raw, got, files := prod.(*fetcher).CarriedRecords()
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
	if err := d.EditRecords(ctx, digest, func([]byte) ([]byte, error) { return rec, nil }); err != nil {
		t.Fatal(err)
	}
	if raw, _ := carried(); !bytes.Equal(raw, rec) {
		t.Fatalf("records sent %q, want the store's %q", raw, rec)
	}
}

// TestFetchChecksSHA256WhenAsked: a sender whose store records a false
// sha256 for a file, bound by a true tensor tree (what a forger of a
// signed artifact's files would send: the signature binds sha256), passes
// a plain fetch, which trusts the sender's sha256; a fetch whose trust
// gate kept a record (CheckSHA256) reads every file back and refuses it,
// naming the file, and publishes nothing.
func TestFetchChecksSHA256WhenAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeded, sid := storetest.Seeded(t, 1<<20, 2)
	l, err := seeded.Lookup(ctx, mustID(t, sid), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	victim := l.Index.Files[len(l.Index.Files)-1].Path
	id := l.Identity()
	id.Producer.Name = "tree-fetch" // not a passthrough identity, whose fingerprint would catch the lie
	sender := storetest.Open(t)
	forged, _, err := sender.GetOrBuild(ctx, id, storetest.TreeFetch(l, "", victim, false))
	if err != nil {
		t.Fatal(err)
	}
	forged.Close()
	_, addr := serve(t, sender, ServerConfig{})
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("checked=", check), func(t *testing.T) {
			dst := storetest.Open(t)
			got, _, err := Fetch(ctx, dst, []string{addr}, digestOf(t, id), admitting(check))
			if !check {
				if err != nil {
					t.Fatalf("plain fetch: %v", err)
				}
				got.Close()
				return
			}
			var em *artifact.EntryMismatchError
			if !errors.As(err, &em) || em.Path != victim || em.Field != "sha256" {
				t.Fatalf("checked fetch: %v, want a sha256 mismatch naming %s", err, victim)
			}
			if list, _ := dst.List(ctx); len(list) != 0 {
				t.Fatal("an artifact was published")
			}
		})
	}
}
