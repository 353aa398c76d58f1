package main

import (
	"fmt"
	"os"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"github.com/weightsnap/weightsnap/staging"
	"golang.org/x/sys/unix"
)

// parseSize reads sizes such as 1GiB, 512MiB, 100M, 4096 (as recipes do).
func parseSize(s string) (int64, error) { return staging.ParseSize(s) }

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress reports bytes done of a total: a bar on a terminal, a few plain
// lines otherwise.
type progress struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	label string
	total int64
	done  int64
	next  int64
	start time.Time
}

func newProgress(label string, total int64) *progress {
	pr := &progress{label: label, total: total, start: time.Now(), next: total / 4}
	if isTerminal(os.Stderr) {
		pr.p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40))
		pr.bar = pr.p.AddBar(total, mpb.PrependDecorators(decor.Name(label+" "), decor.CountersKibiByte("% .1f / % .1f")),
			mpb.AppendDecorators(decor.AverageSpeed(decor.SizeB1024(0), "% .1f"), decor.Percentage(decor.WCSyncSpace)))
	}
	return pr
}

// Add counts n more bytes done.
func (pr *progress) Add(n int64) {
	pr.done += n
	if pr.bar != nil {
		pr.bar.IncrInt64(n)
		return
	}
	if pr.total > 0 && pr.done >= pr.next && pr.done < pr.total {
		fmt.Fprintf(os.Stderr, "%s: %s of %s (%d%%, %s/s)\n", pr.label, humanBytes(pr.done), humanBytes(pr.total), pr.done*100/pr.total, humanBytes(pr.rate()))
		pr.next += pr.total / 4
	}
}

// rate is the average bytes per second so far.
func (pr *progress) rate() int64 {
	return int64(float64(pr.done) / max(time.Since(pr.start).Seconds(), 1e-3))
}

// Done finishes the bar.
func (pr *progress) Done() {
	if pr.bar != nil {
		pr.bar.SetTotal(-1, true)
		pr.p.Wait()
	}
}
