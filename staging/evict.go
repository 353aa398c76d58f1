package staging

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/procs"
	"golang.org/x/sys/unix"
)

// EvictPlan is a lane a plan evicts to stay under a watermark.
type EvictPlan struct {
	ID       string    `json:"id"`
	Dst      string    `json:"dst"`
	LastUsed time.Time `json:"last_used,omitzero"`
	Bytes    int64     `json:"bytes"` // its files' sizes
	Frees    int64     `json:"frees"` // disk space its eviction frees
}

// inUse names a process that has one of a lane's files open or mapped
// ("" if none): "PATH is open in pid N (COMMAND) in container ID".
func inUse(l *Ledger, open map[procs.Inode]int) string {
	for _, en := range l.Entries {
		if pid, ok := open[procs.Inode{Dev: en.Dev, Ino: en.Ino}]; ok && en.Kind != EntryLink {
			return fmt.Sprintf("%s is open in %s", filepath.Join(l.Dst, en.Path), procs.Describe(pid))
		}
	}
	return ""
}

// busy says why a lane cannot be evicted now ("" if it can): a process has
// one of its files open or mapped, or another process holds its lock.
func (e *Engine) busy(l *Ledger, open map[procs.Inode]int) string {
	if why := inUse(l, open); why != "" {
		return why
	}
	lk, err := e.st.lock(l.ID)
	if err != nil {
		return err.Error()
	}
	lk.unlock()
	return ""
}

// footprint is the disk space evicting a lane frees: the blocks of every
// staged file whose links all belong to the lane.
func footprint(l *Ledger) int64 {
	type inode struct {
		count  uint64
		nlink  uint64
		blocks int64
	}
	inodes := map[procs.Inode]*inode{}
	for _, en := range l.Entries {
		if en.Kind == EntryLink {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(l.Dst, filepath.FromSlash(en.Path)), &st) != nil || st.Dev != en.Dev || st.Ino != en.Ino {
			continue
		}
		k := procs.Inode{Dev: st.Dev, Ino: st.Ino}
		if inodes[k] == nil {
			inodes[k] = &inode{nlink: uint64(st.Nlink), blocks: st.Blocks * 512}
		}
		inodes[k].count++
	}
	var frees int64
	for _, in := range inodes {
		if in.nlink <= in.count {
			frees += in.blocks
		}
	}
	return frees
}

// evictable lists the lanes on filesystem dev that may be evicted, least
// recently used first: staged, not excluded, and not busy. It shares no code
// with the store's capacity (which refuses, never evicts) or the peer's
// staged set (mappings in one process's memory, by reference count): a lane
// is files on disk, its last use is in its ledger and its users are found
// by scanning /proc.
func (e *Engine) evictable(dev uint64, exclude map[string]bool, ledgers []*Ledger, open map[procs.Inode]int) []EvictPlan {
	var out []EvictPlan
	for _, l := range ledgers {
		if exclude[l.ID] || l.State == StateEvicted || len(l.Entries) == 0 {
			continue
		}
		if d, _, err := existingParent(l.Dst); err != nil || d != dev {
			continue
		}
		if e.busy(l, open) != "" {
			continue
		}
		out = append(out, EvictPlan{ID: l.ID, Dst: l.Dst, LastUsed: l.LastUsed, Bytes: l.Bytes, Frees: footprint(l)})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.Before(out[j].LastUsed)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Evict removes a lane's staged files (those no other lane lists too; a
// hardlinked file frees space only when its last link goes) and closes its
// ledger. A lane in use is refused with errdefs.ErrFailedPrecondition, one
// being staged with errdefs.ErrUnavailable.
func (e *Engine) Evict(ctx context.Context, id string) (*LaneStatus, error) {
	ledgers, err := e.ledgers(ctx)
	if err != nil {
		return nil, err
	}
	return e.evict(ctx, id, ledgers, procs.OpenInodes())
}

func (e *Engine) evict(ctx context.Context, id string, ledgers []*Ledger, open map[procs.Inode]int) (*LaneStatus, error) {
	lk, err := e.st.lock(id)
	if err != nil {
		return nil, err
	}
	defer lk.unlock()
	l, err := e.st.Load(id)
	if err != nil {
		return nil, err
	}
	if why := inUse(l, open); why != "" {
		return nil, fmt.Errorf("lane %s is in use: %s: %w", id, why, errdefs.ErrFailedPrecondition)
	}
	frees := footprint(l)
	if _, err := e.removeEntries(ctx, l, l.Entries, ledgers); err != nil {
		return nil, err
	}
	l.State, l.Error, l.Entries, l.Bytes = StateEvicted, "", nil, 0
	if err := e.st.Save(l, artifact.Durable); err != nil {
		return nil, err
	}
	log.G(ctx).WithField("lane", id).WithField("frees", frees).Info("staging: lane evicted")
	s := e.status(l, nil)
	s.Frees = frees
	return &s, nil
}

// removeStale removes the files of a lane's previous run that this run did
// not stage (gone from the source, or now skipped).
func (e *Engine) removeStale(ctx context.Context, l *Ledger, done map[string]Entry) (int, error) {
	var stale []Entry
	for _, en := range l.Entries {
		if _, ok := done[en.Path]; !ok {
			stale = append(stale, en)
		}
	}
	if len(stale) == 0 {
		return 0, nil
	}
	ledgers, err := e.ledgers(ctx)
	if err != nil {
		return 0, err
	}
	return e.removeEntries(ctx, l, stale, ledgers)
}

// removeEntries removes the staged files of entries that no other lane's
// ledger lists at the same path, then the folders this leaves empty below
// the lane's destination.
func (e *Engine) removeEntries(ctx context.Context, l *Ledger, entries []Entry, ledgers []*Ledger) (int, error) {
	shared := map[string]bool{}
	for _, o := range ledgers {
		if o.ID == l.ID || o.State == StateEvicted {
			continue
		}
		for _, en := range o.Entries {
			shared[filepath.Join(o.Dst, filepath.FromSlash(en.Path))] = true
		}
	}
	dirs := map[string]bool{}
	removed := 0
	for _, en := range entries {
		p := filepath.Join(l.Dst, filepath.FromSlash(en.Path))
		if shared[p] {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("lane %s: %w", l.ID, err)
		}
		removed++
		for d := filepath.Dir(p); d != l.Dst && strings.HasPrefix(d, l.Dst+string(filepath.Separator)); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	order := make([]string, 0, len(dirs))
	for d := range dirs {
		order = append(order, d)
	}
	sort.Slice(order, func(i, j int) bool { return len(order[i]) > len(order[j]) })
	for _, d := range order {
		if err := os.Remove(d); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, os.ErrNotExist) {
			log.G(ctx).WithError(err).WithField("lane", l.ID).Debug("staging: folder left")
		}
	}
	return removed, nil
}
