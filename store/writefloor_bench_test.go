//go:build bench

package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/weightsnap/weightsnap/test/benchrow"
	"golang.org/x/sys/unix"
)

// TestWriteFloorBench (make bench): what writing a pull's
// bytes costs, apart from receiving and hashing them: 2 GiB in 4 files
// (WEIGHTSNAP_WRITEFLOOR_MIB sets the size, a multiple of 32 MiB),
// synced, by the store's own way (buffered writes of 1 MiB, writeBehind
// every writebackChunk, fsync, dropCached) and by direct I/O (O_DIRECT,
// 8 MiB aligned writes, 4 in flight per file, fsync), in alternating
// rounds (BENCH_REPS, 5 by default); it prints the seconds and CPU seconds
// per GiB of each as the median of the rounds with its min and max, and the
// store's way over direct I/O with the range the rounds allow
// (test/benchrow). DROP_CACHES=1 (root) empties the page cache before
// every round.
func TestWriteFloorBench(t *testing.T) {
	const files = 4
	size := int64(2 << 30)
	if n, err := strconv.ParseInt(os.Getenv("WEIGHTSNAP_WRITEFLOOR_MIB"), 10, 64); err == nil && n > 0 {
		size = n << 20
	}
	gib := float64(size) / (1 << 30)
	rounds := benchrow.Reps()
	dir := t.TempDir()
	modes := []struct {
		name  string
		write func(t *testing.T, path string, n int64)
	}{{"buffered, writeBehind", bufferedWrite}, {"O_DIRECT, 8 MiB x 4", directWrite}}
	secs, cpus := make([]benchrow.Runs, len(modes)), make([]benchrow.Runs, len(modes))
	for range rounds {
		for i, m := range modes {
			if os.Getenv("DROP_CACHES") == "1" {
				unix.Sync()
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
					t.Fatal(err)
				}
			}
			start, cpu0 := time.Now(), processCPU(t)
			for f := range files {
				m.write(t, filepath.Join(dir, fmt.Sprintf("f%d", f)), size/files)
			}
			secs[i] = append(secs[i], time.Since(start).Seconds())
			cpus[i] = append(cpus[i], (processCPU(t)-cpu0)/gib)
			for f := range files {
				os.Remove(filepath.Join(dir, fmt.Sprintf("f%d", f)))
			}
		}
	}
	fmt.Printf("write floor: %d MiB in %d files, synced; median [min-max] of %d alternating rounds, %d cores\n", size>>20, files, rounds, runtime.NumCPU())
	fmt.Printf("%-24s %20s %20s   %s\n", "write", "s", "CPU-s/GiB", "s over O_DIRECT")
	for i, m := range modes {
		line := fmt.Sprintf("%-24s %20s %20s", m.name, secs[i].Format(2), cpus[i].Format(2))
		if i != len(modes)-1 {
			line += "   " + benchrow.Ratio(secs[i], secs[len(modes)-1])
		}
		fmt.Println(line)
	}
	for i, m := range modes {
		fmt.Printf("runs %s (s): %s\n", m.name, secs[i].List(2))
	}
}

// bufferedWrite writes n bytes at path as a payload file is written:
// 1 MiB writes, writeBehind every writebackChunk, fsync, dropCached.
func bufferedWrite(t *testing.T, path string, n int64) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := pattern(make([]byte, 1<<20))
	var started int64
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if end := off + int64(len(buf)); end-started >= writebackChunk {
			writeBehind(f, started, started, end)
			started = end
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	dropCached(f)
}

// directWrite writes n bytes (a multiple of 8 MiB) at path by O_DIRECT,
// 8 MiB aligned writes, 4 in flight, then fsync.
func directWrite(t *testing.T, path string, n int64) {
	const chunk, depth = 8 << 20, 4
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|unix.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := make(chan []byte, depth)
	for range depth {
		raw := make([]byte, chunk+4096)
		skip := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)) & 4095
		free <- pattern(raw[skip : skip+chunk])
	}
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var werr error
	for off := int64(0); off < n; off += chunk {
		b := <-free
		wg.Go(func() {
			if _, err := f.WriteAt(b, off); err != nil {
				errMu.Lock()
				werr = err
				errMu.Unlock()
			}
			free <- b
		})
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// pattern fills b with bytes no filesystem may skip, and returns it.
func pattern(b []byte) []byte {
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func processCPU(t *testing.T) float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
