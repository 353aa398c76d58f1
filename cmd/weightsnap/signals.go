package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

// signalled is the cause of a command's context cancelled by SIGINT or
// SIGTERM.
type signalled struct{ sig syscall.Signal }

func (s *signalled) Error() string { return "interrupted by " + signalName(s.sig) }

// Unwrap classifies it: the command was cancelled.
func (s *signalled) Unwrap() error { return context.Canceled }

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// withSignals cancels ctx on the first SIGINT or SIGTERM, its cause the
// signal; a second one ends the process at once, as by default. got says
// which signal came, if one did.
func withSignals(parent context.Context) (ctx context.Context, got func() syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(&signalled{s.(syscall.Signal)})
		case <-done:
		}
	}()
	got = func() syscall.Signal {
		var s *signalled
		if errors.As(context.Cause(ctx), &s) {
			return s.sig
		}
		return 0
	}
	return ctx, got, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interruptedExit is the exit status of a command a signal stopped
// (exitcode.Signalled), after it says what the store kept and how to go on
// from there.
func interruptedExit(w io.Writer, sig syscall.Signal, err error) int {
	fmt.Fprintf(w, "weightsnap: %s: %v\n", signalName(sig), err)
	sayKept(w, err)
	return exitcode.Signalled(sig)
}

// sayKept says what an interrupted build kept (a signal, or a source that
// went away) and how to go on from there.
func sayKept(w io.Writer, err error) {
	var ie *store.InterruptedError
	if errors.As(err, &ie) && ie.Kept > 0 {
		of := ""
		if ie.Total > 0 {
			of = fmt.Sprintf(" of %s (%.0f%%)", bytefmt.IEC(ie.Total), 100*float64(ie.Kept)/float64(ie.Total))
		}
		fmt.Fprintf(w, "weightsnap: kept %s%s of %s verified in the store; run the same command again to continue from there (gc keeps it for [store] stale_build_seconds)\n",
			bytefmt.IEC(ie.Kept), of, ie.ID.Short())
	}
}

// reusedLine says what a transfer took from an interrupted one.
func reusedLine(t store.Transfer) string {
	return fmt.Sprintf("reused %s from an interrupted build (%d files whole, %d continued), fetched %s",
		bytefmt.IEC(t.Reused), t.ReusedFiles, t.ResumedFiles, bytefmt.IEC(t.Fetched))
}
