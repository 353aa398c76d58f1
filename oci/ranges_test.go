package oci

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestRangesAuto: with more large files than FilesInFlight, RangesAuto
// streams each file whole from a registry on this host, and cuts them into
// ranges when the registry sends its blobs from another host; every pull
// gives the same, fully valid artifact.
func TestRangesAuto(t *testing.T) {
	ctx := context.Background()
	_, src := checkpoint(t, 24<<20, 3)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		redirect bool
		ranged   bool
	}{{"near", false, false}, {"redirected", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			f.setRedirect(c.redirect)
			defer f.setRedirect(false)
			before := f.rangeGets.Load()
			d := openStore(t)
			pl, rep, err := Pull(ctx, d, remoteFor(t, f, "models/x:v1"), PullOptions{ChunkSize: MinChunkSize, FilesInFlight: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close()
			// The probe is one ranged GET; a ranged pull makes several per file.
			if gets := f.rangeGets.Load() - before; rep.Ranged != c.ranged || (gets > 1) != c.ranged {
				t.Fatalf("ranged %v with %d ranged GETs, want ranged %v", rep.Ranged, gets, c.ranged)
			}
			sameArtifact(t, d, pl, l)
		})
	}
}

func TestRangesFor(t *testing.T) {
	near := rangeProbe{served: true, rtt: 50 * time.Microsecond}
	for _, c := range []struct {
		name      string
		mode      RangeMode
		large     int
		probe     rangeProbe
		wantRange bool
	}{
		{"near, enough files", RangesAuto, 4, near, false},
		{"near, fewer files than in flight", RangesAuto, 1, near, true},
		{"far", RangesAuto, 4, rangeProbe{served: true, rtt: farRTT}, true},
		{"redirected", RangesAuto, 4, rangeProbe{served: true, rtt: 50 * time.Microsecond, redirected: true}, true},
		{"rtt unknown", RangesAuto, 4, rangeProbe{served: true}, false},
		{"on", RangesOn, 4, near, true},
		{"on, ranges not served", RangesOn, 4, rangeProbe{}, false},
		{"auto, ranges not served", RangesAuto, 1, rangeProbe{redirected: true}, false},
	} {
		if got := rangesFor(c.mode, c.large, 2, c.probe); got != c.wantRange {
			t.Errorf("%s: ranges %v, want %v", c.name, got, c.wantRange)
		}
	}
}

// TestTCPRTT: a loopback connection has a round trip, and a short one.
func TestTCPRTT(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			buf := make([]byte, 1)
			c.Read(buf)
			c.Write(buf)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := []byte{1}
	if _, err := c.Write(buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if rtt := tcpRTT(c); rtt <= 0 || rtt >= farRTT {
		t.Fatalf("loopback round trip %v", rtt)
	}
	if rtt := tcpRTT(nil); rtt != 0 {
		t.Fatalf("no connection: %v", rtt)
	}
}
