package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// TestSignalsStopACommand: SIGINT and SIGTERM cancel the command's context
// with the signal as the cause; the command exits 130 or 143 and says what
// the store kept and how to go on.
func TestSignalsStopACommand(t *testing.T) {
	id, _ := artifact.ParseIDHex(strings.Repeat("ab", 32))
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		err  error
		kept string
	}{
		{syscall.SIGINT, 130, &store.InterruptedError{ID: id, Kept: 300 << 20, Total: 600 << 20, Err: context.Canceled},
			"kept 300.0 MiB of 600.0 MiB (50%) of abababababab verified in the store; run the same command again"},
		{syscall.SIGTERM, 143, fmt.Errorf("resolve: %w", &store.InterruptedError{ID: id, Kept: 1 << 20, Err: context.Canceled}),
			"kept 1.0 MiB of abababababab verified"},
		{syscall.SIGINT, 130, context.Canceled, ""},
	} {
		t.Run(signalName(tc.sig), func(t *testing.T) {
			ctx, got, stop := withSignals(context.Background())
			defer stop()
			if err := syscall.Kill(syscall.Getpid(), tc.sig); err != nil {
				t.Fatal(err)
			}
			<-ctx.Done()
			if got() != tc.sig || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Fatalf("signal %v, cause %v", got(), context.Cause(ctx))
			}
			var w bytes.Buffer
			if code := interruptedExit(&w, got(), tc.err); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			if !strings.HasPrefix(w.String(), "weightsnap: "+signalName(tc.sig)+": ") || !strings.Contains(w.String(), tc.kept) ||
				(tc.kept == "" && strings.Contains(w.String(), "kept")) {
				t.Fatalf("said %q, want %q", w.String(), tc.kept)
			}
		})
	}
	// No signal: the cause is the stop's, and no signal is named.
	ctx, got, stop := withSignals(context.Background())
	stop()
	if got() != 0 || ctx.Err() == nil {
		t.Fatalf("stopped without a signal: %v, %v", got(), ctx.Err())
	}
}
