package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"golang.org/x/sys/unix"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progressEvery is how often progress on a non-terminal prints a line.
const progressEvery = 5 * time.Second

// progress reports bytes done of a total: a bar on a terminal; elsewhere
// (a log, a CI job) a line every progressEvery with the bytes, the rate and
// the time left, and a last line once done. Bytes reused from an
// interrupted run count as done but not in the rate. It is safe to feed
// from several goroutines.
type progress struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	w     io.Writer
	label string
	total int64
	start time.Time
	stop  chan struct{}
	ended chan struct{}

	mu     sync.Mutex
	done   int64
	reused int64
}

func newProgress(label string, total int64) *progress {
	if isTerminal(os.Stderr) {
		pr := &progress{label: label, total: total, start: time.Now()}
		pr.p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40))
		// The rate is the bytes this run moved (a resumed run's reused bytes
		// left out), as on a non-terminal.
		rate := decor.Any(func(decor.Statistics) string {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return bytefmt.IEC(pr.rate(time.Now())) + "/s"
		})
		pr.bar = pr.p.AddBar(total, mpb.PrependDecorators(decor.Name(label+" "), decor.CountersKibiByte("% .1f / % .1f")),
			mpb.AppendDecorators(rate, decor.Percentage(decor.WCSyncSpace)))
		return pr
	}
	return newLineProgress(os.Stderr, label, total, progressEvery)
}

// newLineProgress is the non-terminal progress: a line to w every interval
// until Done.
func newLineProgress(w io.Writer, label string, total int64, every time.Duration) *progress {
	pr := &progress{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(pr.ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-pr.stop:
				return
			case now := <-t.C:
				pr.mu.Lock()
				if pr.done < pr.total {
					fmt.Fprintln(pr.w, pr.line(now))
				}
				pr.mu.Unlock()
			}
		}
	}()
	return pr
}

// Add counts n more bytes done.
func (pr *progress) Add(n int64) {
	pr.mu.Lock()
	pr.done += n
	pr.mu.Unlock()
	if pr.bar != nil {
		pr.bar.IncrInt64(n)
	}
}

// Reused counts n of the bytes done (given to Add too) as reused from an
// interrupted run: they are not in the rate.
func (pr *progress) Reused(n int64) {
	pr.mu.Lock()
	pr.reused += n
	pr.mu.Unlock()
}

// line is the progress at now: bytes done of the total, the rate of the
// bytes this run moved and the time left at that rate.
func (pr *progress) line(now time.Time) string {
	s := fmt.Sprintf("%s: %s of %s", pr.label, bytefmt.IEC(pr.done), bytefmt.IEC(pr.total))
	if pr.total > 0 {
		s += fmt.Sprintf(" (%d%%)", pr.done*100/pr.total)
	}
	rate := pr.rate(now)
	s += fmt.Sprintf(", %s/s", bytefmt.IEC(rate))
	if pr.reused > 0 {
		s += fmt.Sprintf(", %s reused", bytefmt.IEC(pr.reused))
	}
	if left := pr.total - pr.done; rate > 0 && left > 0 {
		s += ", " + (time.Duration(float64(left)/float64(rate)) * time.Second).Round(time.Second).String() + " left"
	}
	return s
}

// rate is the average bytes per second this run moved (reused bytes are
// not counted).
func (pr *progress) rate(now time.Time) int64 {
	return int64(float64(max(pr.done-pr.reused, 0)) / max(now.Sub(pr.start).Seconds(), 1e-3))
}

// End finishes the bar, or prints the last line: done when err is nil,
// else where the work stopped.
func (pr *progress) End(err error) {
	if pr.bar != nil {
		pr.bar.SetTotal(-1, true)
		pr.p.Wait()
		return
	}
	close(pr.stop)
	<-pr.ended
	pr.mu.Lock()
	defer pr.mu.Unlock()
	fmt.Fprintln(pr.w, pr.endLine(time.Now(), err))
}

// endLine says what the run did: the bytes, the time and the rate, or
// where it stopped when it failed with err. A run that succeeded with
// fewer bytes than its total (a warm import, a producer that read part of
// its source) says how many of the total it moved.
func (pr *progress) endLine(now time.Time, err error) string {
	took := now.Sub(pr.start).Round(100 * time.Millisecond)
	var s string
	switch {
	case err != nil:
		s = fmt.Sprintf("%s: stopped at %s of %s after %s", pr.label, bytefmt.IEC(pr.done), bytefmt.IEC(pr.total), took)
	case pr.done < pr.total:
		s = fmt.Sprintf("%s: done, %s of %s in %s", pr.label, bytefmt.IEC(pr.done), bytefmt.IEC(pr.total), took)
	default:
		s = fmt.Sprintf("%s: done, %s in %s", pr.label, bytefmt.IEC(pr.done), took)
	}
	s += fmt.Sprintf(" (%s/s", bytefmt.IEC(pr.rate(now)))
	if pr.reused > 0 {
		s += fmt.Sprintf("; %s reused", bytefmt.IEC(pr.reused))
	}
	return s + ")"
}
