package oci

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
)

// benchSize is the artifact size of the Go benchmarks (WS_OCI_BENCH_BYTES
// overrides it); scripts/bench-oci.sh compares against oras on a real
// registry with a larger one.
func benchSize() int64 {
	if v, err := strconv.ParseInt(os.Getenv("WS_OCI_BENCH_BYTES"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 256 << 20
}

// BenchmarkPush pushes an artifact to a fresh repository of an in-memory
// registry each time: payload streamed from the lease, blobs in parallel.
func BenchmarkPush(b *testing.B) {
	_, src := storetest.Checkpoint(b, benchSize(), 4)
	_, l := imported(b, src)
	f := newFakeRegistry(b)
	b.SetBytes(l.Index.TotalBytes())
	i := 0
	for b.Loop() {
		i++
		if _, err := Push(context.Background(), l, remoteFor(b, f, fmt.Sprintf("bench/push%d:v1", i)), PushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPull pulls an artifact into a fresh store each time, with every
// verification and fsync the store does (auto: one stream per shard here;
// ranged: every shard in parallel ranges, written in order).
func BenchmarkPull(b *testing.B) {
	_, src := storetest.Checkpoint(b, benchSize(), 4)
	_, l := imported(b, src)
	f := newFakeRegistry(b)
	if _, err := Push(context.Background(), l, remoteFor(b, f, "bench/pull:v1"), PushOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mode RangeMode
	}{{"auto", RangesAuto}, {"ranged", RangesOn}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(l.Index.TotalBytes())
			for b.Loop() {
				b.StopTimer()
				d := storetest.Open(b)
				b.StartTimer()
				pl, _, err := Pull(context.Background(), d, remoteFor(b, f, "bench/pull:v1"), PullOptions{Ranges: c.mode})
				if err != nil {
					b.Fatal(err)
				}
				pl.Close()
			}
		})
	}
}
