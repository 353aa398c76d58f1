package store

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// progressWatch is an inotify watch of a build's progress file: a follower
// sleeps on it until the builder appends a record or removes the file.
type progressWatch struct {
	f *os.File // the inotify instance, in Go's poller
}

// watchProgress watches prog for writes and for its removal at publication.
// It returns nil where inotify cannot watch it: the follower then polls.
func watchProgress(prog *os.File) *progressWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	// The descriptor's link names the file the follower opened, wherever
	// its directory is now.
	if _, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(int(prog.Fd())), unix.IN_MODIFY|unix.IN_ATTRIB); err != nil {
		unix.Close(fd)
		return nil
	}
	return &progressWatch{f: os.NewFile(uintptr(fd), "inotify")}
}

// wait sleeps until the watched file changes, for at most d, or until ctx
// ends (it returns ctx's cause). A nil watch sleeps d.
func (w *progressWatch) wait(ctx context.Context, d time.Duration) error {
	if w != nil && w.f.SetReadDeadline(time.Now().Add(d)) == nil {
		stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
		var events [4096]byte // a read takes every pending event
		_, err := w.f.Read(events[:])
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// close ends the watch, if any.
func (w *progressWatch) close() {
	if w != nil {
		w.f.Close()
	}
}
