// Package fanout runs a loop's iterations on a few goroutines: for the
// per-file system calls of a model of many small files, which on a node
// of many cores need not wait for each other.
package fanout

import (
	"runtime"
	"sync"
)

// Each gives each goroutine a run of at least MinRun iterations, on up to
// MaxGoroutines goroutines (and no more than GOMAXPROCS).
const (
	MinRun        = 64
	MaxGoroutines = 8
)

// Each calls fn(i) for every i in [0, n) on a few goroutines, each over a
// run of consecutive indexes (MinRun, MaxGoroutines), so that a short loop
// stays on the caller's goroutine. A goroutine stops at its first error;
// Each returns the error of the lowest index that failed, after every
// goroutine has returned.
func Each(n int, fn func(i int) error) error { return each(n, MinRun, MaxGoroutines, fn) }

func each(n, minRun, limit int, fn func(i int) error) error {
	workers := max(1, min(limit, runtime.GOMAXPROCS(0), n/max(minRun, 1)))
	if workers == 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w * n / workers; i < (w+1)*n/workers; i++ {
				if err := fn(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
