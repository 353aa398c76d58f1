package staging_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/staging"
	"golang.org/x/sys/unix"
)

// benchFiles writes the repository scripts/bench-staging.sh stages as its
// 1,000-file lane: n git files of 4 KiB to 64 KiB.
func benchFiles(b *testing.B, cache string, n int) {
	files := make([]hubFile, n)
	for i := range files {
		files[i] = hubFile{path: fmt.Sprintf("f%d-%d.json", i%20, i), data: randBytes(uint64(i), 4096+(i*37)%61440)}
	}
	writeHub(b, cache, "org/many", commitOf("bench"), files)
}

// BenchmarkNoopRerun is the no-op re-run of a staged 1,000-file lane in
// mode auto: every file's destination stat'ed and its source sampled,
// nothing copied (bench-staging.sh's "re-run (auto)" row, without the
// process start).
func BenchmarkNoopRerun(b *testing.B) {
	for _, verify := range []string{"full", "sample-hash"} {
		b.Run(verify, func(b *testing.B) {
			src := filepath.Join(b.TempDir(), "hub")
			benchFiles(b, src, 1000)
			st, err := staging.OpenState(b.TempDir(), "node-a")
			must(b, err)
			e := staging.New(st, staging.Options{Mode: staging.ModeAuto})
			r, err := staging.ParseRecipe("bench.toml", []byte(hubRecipe("many", src, filepath.Join(b.TempDir(), "hub"), "verify = \""+verify+"\"\n")))
			must(b, err)
			ctx := b.Context()
			if _, err := e.Stage(ctx, r); err != nil {
				b.Fatal(err)
			}
			// Labeled, so a -cpuprofile can be cut to the re-runs
			// (go tool pprof -tagfocus run=noop).
			cpu0 := cpuTime(b)
			pprof.Do(ctx, pprof.Labels("run", "noop"), func(ctx context.Context) {
				for b.Loop() {
					rep, err := e.Stage(ctx, r)
					if err != nil {
						b.Fatal(err)
					}
					if l := rep.Lanes[0]; l.Unchanged != 2001 || l.Copied != 0 {
						b.Fatalf("re-run: %+v", l)
					}
				}
			})
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	must(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
