package main

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// lockedBuffer is a bytes.Buffer the progress's ticker writes while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLineProgress: on a non-terminal, progress prints a line every
// interval while the work goes on (not only at quarters: here the bytes
// stay at 10%), with the bytes, the rate and the time left, and a done line
// at the end.
func TestLineProgress(t *testing.T) {
	var out lockedBuffer
	pr := newLineProgress(&out, "pull", 100<<20, time.Millisecond)
	pr.Add(10 << 20)
	if err := testenv.Wait(10*time.Second, func() error {
		if strings.Count(out.String(), "pull: 10.0 MiB of 100.0 MiB (10%), ") < 2 {
			return errors.New(out.String())
		}
		return nil
	}); err != nil {
		t.Fatalf("no two progress lines: %v", err)
	}
	pr.Add(90 << 20)
	pr.End(nil)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !strings.Contains(l, "/s, ") || !strings.HasSuffix(l, " left") {
			t.Errorf("a progress line without rate and time left: %q", l)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "pull: done, 100.0 MiB in ") {
		t.Errorf("last line %q, want the done line", last)
	}
	if n := len(lines); strings.Count(out.String(), "done") != 1 || n < 3 {
		t.Errorf("%d lines:\n%s", n, out.String())
	}
}

// TestProgressRateNewBytes: a resumed run's rate and time left count only
// the bytes it moved, not those reused from the interrupted run.
func TestProgressRateNewBytes(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pr := &progress{label: "pull", total: 1000, start: t0}
	pr.Add(500)
	pr.Reused(500)
	pr.Add(100)
	if got, want := pr.line(t0.Add(time.Second)), "pull: 600 B of 1000 B (60%), 100 B/s, 500 B reused, 4s left"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	pr.Add(400)
	if got, want := pr.endLine(t0.Add(5*time.Second), nil), "pull: done, 1000 B in 5s (100 B/s; 500 B reused)"; got != want {
		t.Errorf("done line %q, want %q", got, want)
	}
}

// TestProgressEndLine: the last line says done for work that succeeded,
// however few of its bytes it moved (a warm import, a tp-split that read
// part of its source), and where it stopped for work that failed.
func TestProgressEndLine(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		done int64
		err  error
		want string
	}{
		{"every byte", 1000, nil, "import: done, 1000 B in 1s (1000 B/s)"},
		{"warm import", 0, nil, "import: done, 0 B of 1000 B in 1s (0 B/s)"},
		{"part of the source read", 250, nil, "import: done, 250 B of 1000 B in 1s (250 B/s)"},
		{"failed", 250, errors.New("registry went away"), "import: stopped at 250 B of 1000 B after 1s (250 B/s)"},
	} {
		pr := &progress{label: "import", total: 1000, start: t0}
		pr.Add(tc.done)
		if got := pr.endLine(t0.Add(time.Second), tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
