package resolve_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// BenchmarkResolveWarm measures a warm resolve: fingerprint cache hits for
// every source file, then a store lookup with manifest_and_metadata
// validation, for a 256 MiB and a 2 GiB artifact of the same file count.
// Its cost grows with files, not bytes. "reuse" resolves through one
// runtime; "new-runtime" opens the domain each time, as a new process does.
// The 2 GiB case writes 4 GiB to the temp directory and is skipped with -short.
func BenchmarkResolveWarm(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int64
	}{{"256MiB", 256 << 20}, {"2GiB", 2 << 30}} {
		b.Run(size.name, func(b *testing.B) {
			if size.bytes > 256<<20 && testing.Short() {
				b.Skip("the 2 GiB case is skipped with -short")
			}
			src := storetest.SettledCheckpoint(b, size.bytes, 4)
			cfg := resolve.Config{Root: filepath.Join(b.TempDir(), "root"), Mode: resolve.Required,
				AllowLocalBuild: true, Validation: store.ManifestAndMetadata}
			req := resolve.Request{Source: src, Target: target, Local: producers.Passthrough{}}
			cold, err := newRuntime(b, cfg).Resolve(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			files, total := len(cold.Lease.Index.Files), cold.Lease.Index.TotalBytes()
			cold.Close()
			for _, mode := range []string{"reuse", "new-runtime"} {
				b.Run(mode, func(b *testing.B) {
					rt := newRuntime(b, cfg)
					for b.Loop() {
						if mode == "new-runtime" {
							rt = newRuntime(b, cfg)
						}
						res, err := rt.Resolve(context.Background(), req)
						if err != nil {
							b.Fatal(err)
						}
						if c := res.Report.Counters; res.Report.Outcome != resolve.OutcomeHit || c.SourceBytesRead != 0 || c.ProducerRuns != 0 {
							b.Fatalf("not a warm hit: %+v", res.Report)
						}
						res.Close()
					}
					b.ReportMetric(float64(files), "files")
					b.ReportMetric(float64(total)/(1<<20), "MiB")
				})
			}
		})
	}
}
