package testenv

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestWait: a try that succeeds ends the wait; a final error ends it at
// once; one that keeps failing ends it at the timeout with its last error.
func TestWait(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		fails int   // tries that fail before one succeeds (-1: never)
		err   error // the error of a failing try
		final bool
		want  string // "" for success
		tries int
	}{
		{name: "at once", fails: 0, tries: 1},
		{name: "after three", fails: 3, err: boom, tries: 4},
		{name: "final", fails: -1, err: boom, final: true, want: "boom", tries: 1},
		{name: "timeout", fails: -1, err: boom, want: "not within 50ms: boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 0
			err := Wait(50*time.Millisecond, func() error {
				n++
				if c.fails >= 0 && n > c.fails {
					return nil
				}
				if c.final {
					return Final(c.err)
				}
				return c.err
			})
			if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, c.err)) {
				t.Fatalf("Wait: %v, want %q", err, c.want)
			}
			if c.tries > 0 && n != c.tries {
				t.Fatalf("%d tries, want %d", n, c.tries)
			}
			if c.tries == 0 && n < 2 {
				t.Fatalf("%d tries before the timeout", n)
			}
		})
	}
}

// TestEventuallyFails: a condition never true fails the test with the
// message and the timeout.
func TestEventuallyFails(t *testing.T) {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(r, 20*time.Millisecond, func() bool { return false }, "the %s never came", "thing")
	}()
	<-done
	if !r.failed || !strings.Contains(r.msg, "the thing never came (not within 20ms)") {
		t.Fatalf("failed %v, message %q", r.failed, r.msg)
	}
	calls := 0
	Eventually(t, time.Second, func() bool { calls++; return calls == 3 }, "never")
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

// TestSkipRequireAll: with WEIGHTSNAP_REQUIRE_ALL=1 a skip is a failure;
// without it, a skip.
func TestSkipRequireAll(t *testing.T) {
	for _, c := range []struct {
		env             string
		failed, skipped bool
	}{{"1", true, false}, {"", false, true}} {
		t.Setenv(RequireAllEnv, c.env)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Skip(r, "no reason")
		}()
		<-done
		if r.failed != c.failed || r.skipped != c.skipped || !strings.Contains(r.msg, "no reason") {
			t.Fatalf("%s=%q: failed %v skipped %v (%q)", RequireAllEnv, c.env, r.failed, r.skipped, r.msg)
		}
	}
}

// recorder records a Fatalf or a Skip, ending the goroutine as they do.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
