package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sys/unix"
)

// A lock is an open lock file holding a flock. Go opens files close-on-exec,
// so a child process never inherits the descriptor; closing it (never
// LOCK_UN) releases the lock only when the last descriptor goes.
type lock struct{ f *os.File }

// lockFile takes a flock of kind how (LOCK_SH or LOCK_EX) on path, creating
// the file, and waits until deadline, polling with an exponential backoff
// (1 ms doubling to 50 ms), since flock cannot be cancelled; the context
// bounds the wait too. A waiter never breaks another process's lock.
func lockFile(ctx context.Context, path string, how int, deadline time.Time, what string) (*lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	poll := &backoff.ExponentialBackOff{InitialInterval: time.Millisecond, Multiplier: 2, MaxInterval: 50 * time.Millisecond}
	_, err = backoff.Retry(wctx, func() (struct{}, error) {
		ok, err := flockNB(f, how)
		if err != nil {
			return struct{}{}, backoff.Permanent(fmt.Errorf("flock %s: %w", path, err))
		}
		if !ok {
			return struct{}{}, errLockHeld
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(poll), backoff.WithMaxElapsedTime(0))
	switch {
	case err == nil:
		return &lock{f: f}, nil
	case errors.Is(err, errLockHeld), errors.Is(err, context.DeadlineExceeded):
		f.Close()
		return nil, &TimeoutError{What: what} // this wait's or the caller's own budget ran out
	case ctx.Err() != nil:
		f.Close()
		return nil, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	default:
		f.Close()
		return nil, err
	}
}

// errLockHeld is a flock another holder has.
var errLockHeld = errors.New("lock held")

// flockNB tries once to take a flock; ok is false when another holder has it.
func flockNB(f *os.File, how int) (ok bool, err error) {
	err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
		return false, nil
	}
	return err == nil, err
}

// tryLock takes a flock without waiting; ok is false when another holder has it.
func tryLock(path string, how int) (l *lock, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("open lock %s: %w", path, err)
	}
	if ok, err = flockNB(f, how); !ok {
		f.Close()
		if err != nil {
			err = fmt.Errorf("flock %s: %w", path, err)
		}
		return nil, false, err
	}
	return &lock{f: f}, true, nil
}

// Close releases the lock by closing the descriptor.
func (l *lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// LockHolder is a process that held a flock when the store looked.
type LockHolder struct {
	PID  int    `json:"pid"`
	Mode string `json:"mode"` // READ (shared) or WRITE (exclusive)
	Lock string `json:"lock"` // lock file name
}

// lockHolders lists, from /proc/locks, the holders of the flocks on the
// given lock files (by inode). It is a point-in-time view.
func lockHolders(paths ...string) []LockHolder {
	inodes := map[uint64]string{}
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			inodes[st.Ino] = filepath.Base(p)
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []LockHolder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[0] == "->" {
			continue
		}
		parts := strings.Split(fields[5], ":")
		ino, err1 := strconv.ParseUint(parts[len(parts)-1], 10, 64)
		pid, err2 := strconv.Atoi(fields[4])
		if err1 != nil || err2 != nil {
			continue
		}
		if name, ok := inodes[ino]; ok {
			out = append(out, LockHolder{PID: pid, Mode: fields[3], Lock: name})
		}
	}
	return out
}
