package snapshotter

import (
	"context"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// processCPU is the process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSharedView is the building of a new shared view of a model of
// 1,000 files, in each layout, the lease already taken: what the first
// image of an artifact on a node adds to its Prepare.
func BenchmarkSharedView(b *testing.B) {
	for _, layout := range []string{"", pointer.LayoutHF} {
		name := "own"
		if layout != "" {
			name = layout
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			n := newNode(b, b.TempDir())
			id := artifact.MustParseID(importInto(b, n.dom, manyFilesModel(b, 1000-8)))
			l, err := n.dom.Lookup(ctx, id, store.ManifestAndMetadata)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ptr := pointer.Pointer{Schema: pointer.Schema, Artifact: "reg.example/models/m@sha256:" + id.Hex(), ID: id, Target: "/models/m", Layout: layout}
			if layout != "" {
				ptr.Repo = "org/m"
			}
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := n.sn.views.remove(id); err != nil {
					b.Fatal(err)
				}
				cpu0 := processCPU(b)
				b.StartTimer()
				if _, _, err := n.sn.views.get(ctx, ptr, l, n.sn.links); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += processCPU(b) - cpu0
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "CPU-ms/op")
		})
	}
}
