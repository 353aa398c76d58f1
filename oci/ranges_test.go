package oci

import (
	"context"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
)

// TestRangesAuto: with more large files than FilesInFlight, RangesAuto
// streams each file whole from a registry on this host, and cuts them into
// ranges when the registry sends its blobs from another host; every pull
// gives the same, fully valid artifact.
func TestRangesAuto(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 24<<20, 3)
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
			d := storetest.Open(t)
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
	near := registry.RangeProbe{Served: true, RTT: 50 * time.Microsecond}
	for _, c := range []struct {
		name      string
		mode      RangeMode
		large     int
		probe     registry.RangeProbe
		wantRange bool
	}{
		{"near, enough files", RangesAuto, 4, near, false},
		{"near, fewer files than in flight", RangesAuto, 1, near, true},
		{"far", RangesAuto, 4, registry.RangeProbe{Served: true, RTT: farRTT}, true},
		{"redirected", RangesAuto, 4, registry.RangeProbe{Served: true, RTT: 50 * time.Microsecond, Redirected: true}, true},
		{"rtt unknown", RangesAuto, 4, registry.RangeProbe{Served: true}, false},
		{"on", RangesOn, 4, near, true},
		{"on, ranges not served", RangesOn, 4, registry.RangeProbe{}, false},
		{"auto, ranges not served", RangesAuto, 1, registry.RangeProbe{Redirected: true}, false},
	} {
		if got := rangesFor(c.mode, c.large, 2, c.probe); got != c.wantRange {
			t.Errorf("%s: ranges %v, want %v", c.name, got, c.wantRange)
		}
	}
}
