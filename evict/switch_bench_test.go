//go:build bench

package evict_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestModelSwitchingBench (make bench): twelve models cycled
// through a store that holds four, two of them pinned, in a deterministic
// Zipf order (the popular ones often, the others now and then), each start
// a GetOrBuild (a miss builds from the local source, as a pull would from
// its registry). It prints the starts, the hit ratio, the evictions, the
// bytes fetched and what an eviction adds to a start (goal: under 50 ms per
// evicted artifact, nothing when nothing is evicted).
// WEIGHTSNAP_SWITCH_MIB sets the model size (default 64).
func TestModelSwitchingBench(t *testing.T) {
	size := int64(64)
	if n, err := strconv.ParseInt(os.Getenv("WEIGHTSNAP_SWITCH_MIB"), 10, 64); err == nil && n > 0 {
		size = n
	}
	size <<= 20
	const models, starts, pinned = 12, 60, 2
	ctx := context.Background()
	srcs := make([]*artifact.SourceDir, models)
	ids := make([]artifact.Identity, models)
	for i := range models {
		srcs[i], ids[i] = storetest.Model(t, size, uint64(900+i))
	}
	policy := store.DefaultPolicy()
	policy.MaxStoreBytes = bytefmt.Size(4*size + 4<<20)
	d, ev := open(t, t.TempDir(), policy)
	var evictions []store.Evicted
	ev.OnEvict(func(e store.Evicted) { evictions = append(evictions, e) })
	for i := range pinned {
		id, err := storetest.Build(ctx, d, srcs[i], ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Pin(ctx, id, store.Pin{By: store.PinByCLI, Reason: "bench"}); err != nil {
			t.Fatal(err)
		}
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(32, 7)), 1.3, 1, models-1)
	var hits, misses, evicting int
	var fetched int64
	var hitTime, missTime, evictTime time.Duration
	for range starts {
		i := int(zipf.Uint64())
		before := len(evictions)
		t0 := time.Now()
		l, res, err := d.GetOrBuild(ctx, ids[i], &artifact.Passthrough{Src: srcs[i]})
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("start of model %d: %v", i, err)
		}
		l.Close()
		switch {
		case !res.Built:
			hits++
			hitTime += took
		default:
			misses++
			missTime += took
			fetched += size
		}
		if n := len(evictions) - before; n > 0 {
			evicting++
			for _, e := range evictions[before:] {
				evictTime += time.Duration(e.Seconds * float64(time.Second))
			}
		}
	}
	perEviction := time.Duration(0)
	if len(evictions) > 0 {
		perEviction = evictTime / time.Duration(len(evictions))
	}
	fmt.Printf("model switching: %d models of %d MiB, a store that holds 4 (%d pinned), %d starts, %d cores\n", models, size>>20, pinned, starts, runtime.NumCPU())
	fmt.Printf("%8s %8s %6s %10s %12s %14s %14s %16s\n", "starts", "hits", "ratio", "evictions", "fetched MiB", "hit start ms", "miss start ms", "ms per eviction")
	fmt.Printf("%8d %8d %6.2f %10d %12d %14.1f %14.1f %16.2f\n", starts, hits, float64(hits)/starts, len(evictions), fetched>>20,
		ms(hitTime, hits), ms(missTime, misses), float64(perEviction)/float64(time.Millisecond))
	if perEviction > 50*time.Millisecond {
		t.Errorf("an eviction took %v on average, goal under 50 ms", perEviction)
	}
	if evicting == 0 {
		t.Error("no start evicted: the bench measures nothing")
	}
}

func ms(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d) / float64(n) / float64(time.Millisecond)
}
