package sim

import "container/heap"

// queue is the events to run, earliest first; events at the same instant run in the order they
// were scheduled, so a run is deterministic.
type queue struct {
	h   eventHeap
	seq uint64
	now float64
}

type event struct {
	t   float64
	seq uint64
	f   func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func (q *queue) len() int { return len(q.h) }

func (q *queue) push(t float64, f func()) {
	q.seq++
	heap.Push(&q.h, event{t: max(t, q.now), seq: q.seq, f: f})
}

// pop advances the clock to the earliest event and returns it.
func (q *queue) pop() func() {
	e := heap.Pop(&q.h).(event)
	q.now = e.t
	return e.f
}
