package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestProgressWatch: a watch of a progress file wakes its follower on an
// append and on the file's removal, and gives up with ctx's cause.
func TestProgressWatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string, f *os.File) error
		cancel bool
		want   error
	}{
		{name: "append", change: func(_ string, f *os.File) error { _, err := f.Write([]byte("record")); return err }},
		{name: "removal", change: func(path string, _ *os.File) error { return os.Remove(path) }},
		{name: "cancelled", cancel: true, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), fileProgress)
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			prog, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			w := watchProgress(prog)
			if w == nil {
				t.Skip("no inotify here")
			}
			defer w.close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			if tc.change != nil {
				if err := tc.change(path, f); err != nil {
					t.Fatal(err)
				}
			}
			// An hour: only the change or ctx can end the wait.
			if err := w.wait(ctx, time.Hour); !errors.Is(err, tc.want) {
				t.Fatalf("wait: %v, want %v", err, tc.want)
			}
		})
	}
}
