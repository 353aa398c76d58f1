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
	"github.com/weightsnap/weightsnap/test/benchrow"
)

// TestModelSwitchingBench (make bench): twelve models cycled
// through a store that holds four, two of them pinned, in a deterministic
// Zipf order (the popular ones often, the others now and then), each start
// a GetOrBuild (a miss builds from the local source, as a pull would from
// its registry). Each round (BENCH_REPS, 5 by default) runs the whole cycle
// on an empty store, and the disk's floor of a miss: one model's bytes
// written to a new file and synced. It prints the hits, the evictions, the
// bytes fetched and the mean hit start, miss start and eviction of each
// round as the median of the rounds with its min and max, and a miss start
// over the disk floor with the range the rounds allow (test/benchrow).
// Goal: an eviction adds under 50 ms per evicted artifact to a start,
// nothing when nothing is evicted. WEIGHTSNAP_SWITCH_MIB sets the model
// size (default 64).
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
	reps := benchrow.Reps()
	var hits, evictions, fetched, hitMS, missMS, evictMS, diskMS benchrow.Runs
	for round := range reps {
		t.Logf("round %d of %d", round+1, reps)
		root := t.TempDir()
		diskMS = append(diskMS, syncedWrite(t, root, size)*1e3)
		d, ev := open(t, root, policy)
		var evicted []store.Evicted
		ev.OnEvict(func(e store.Evicted) { evicted = append(evicted, e) })
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
		var hit, miss int
		var hitTime, missTime, evictTime time.Duration
		for range starts {
			i := int(zipf.Uint64())
			before := len(evicted)
			t0 := time.Now()
			l, res, err := d.GetOrBuild(ctx, ids[i], &artifact.Passthrough{Src: srcs[i]})
			took := time.Since(t0)
			if err != nil {
				t.Fatalf("start of model %d: %v", i, err)
			}
			l.Close()
			if res.Built {
				miss++
				missTime += took
			} else {
				hit++
				hitTime += took
			}
			for _, e := range evicted[before:] {
				evictTime += time.Duration(e.Seconds * float64(time.Second))
			}
		}
		hits = append(hits, float64(hit))
		evictions = append(evictions, float64(len(evicted)))
		fetched = append(fetched, float64(int64(miss)*size>>20))
		hitMS, missMS = append(hitMS, ms(hitTime, hit)), append(missMS, ms(missTime, miss))
		evictMS = append(evictMS, ms(evictTime, len(evicted)))
	}
	fmt.Printf("model switching: %d models of %d MiB, a store that holds 4 (%d pinned), %d starts, %d cores\n", models, size>>20, pinned, starts, runtime.NumCPU())
	fmt.Printf("median [min-max] of %d rounds, each on an empty store in the same Zipf order\n", reps)
	fmt.Printf("  %-28s %24s\n", "hits", hits.Format(0))
	fmt.Printf("  %-28s %24s\n", "evictions", evictions.Format(0))
	fmt.Printf("  %-28s %24s\n", "fetched MiB", fetched.Format(0))
	fmt.Printf("  %-28s %24s\n", "disk floor ms (a miss's write)", diskMS.Format(1))
	fmt.Printf("  %-28s %24s\n", "hit start ms", hitMS.Format(1))
	fmt.Printf("  %-28s %24s   over the disk floor %s\n", "miss start ms", missMS.Format(1), benchrow.Ratio(missMS, diskMS))
	fmt.Printf("  %-28s %24s\n", "ms per eviction", evictMS.Format(2))
	fmt.Printf("  runs (ms): disk floor %s | miss start %s | eviction %s\n", diskMS.List(1), missMS.List(1), evictMS.List(2))
	if evictMS.Median() > 50 {
		t.Errorf("an eviction took %.2f ms on average (median of the rounds), goal under 50 ms", evictMS.Median())
	}
	if evictions.Min() == 0 {
		t.Error("a round evicted nothing: the bench measures nothing")
	}
}

func ms(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d) / float64(n) / float64(time.Millisecond)
}

// syncedWrite is the disk's floor for n bytes in one file under dir.
func syncedWrite(t *testing.T, dir string, n int64) float64 {
	t.Helper()
	secs, err := benchrow.DiskFloor(dir, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	return secs
}
