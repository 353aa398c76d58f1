package staging

import (
	"sync"
	"sync/atomic"
)

// parallelFor calls fn(i) for every i in [0, n), with up to workers
// goroutines taking the next 64 indexes at a time: the per-file stat and
// link reads of a plan, which for a few files are not worth a goroutine.
func parallelFor(n, workers int, fn func(i int)) {
	const per = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, (n+per-1)/per)) {
		wg.Go(func() {
			for {
				lo := int(next.Add(per)) - per
				if lo >= n {
					return
				}
				for i := lo; i < min(lo+per, n); i++ {
					fn(i)
				}
			}
		})
	}
	wg.Wait()
}
