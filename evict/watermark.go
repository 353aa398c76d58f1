package evict

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

// WatchInterval is how often Watch compares the store's filesystem with
// the high watermark: the kubelet's housekeeping interval.
const WatchInterval = 10 * time.Second

// epoch is the last use a demoted artifact gets: older than any use.
var epoch = time.Unix(1, 0)

// Demote makes id the first eviction candidate: nothing on the node needs
// it any more, as when the kubelet removed the last image that needs it.
// Its next use records a time again.
func (p *Policy) Demote(id artifact.ID) error { return p.d.SetLastUse(id, epoch) }

// ToWatermark evicts down to the low watermark once the filesystem is past the high one.
// It does as the kubelet's image garbage collection does.
// It reports nil when nothing was needed.
func (p *Policy) ToWatermark(ctx context.Context) (*Report, error) {
	return p.evictPast(ctx, p.d.Policy().HighWatermarkPercent, Watermark)
}

// Unneeded evicts down to the low watermark once the filesystem is past it.
// The CRI calls it once the kubelet removed the last image that needs an artifact.
// Demote made that artifact the first candidate.
// The kubelet removes images to get their space back.
// It reports nil when nothing was needed.
func (p *Policy) Unneeded(ctx context.Context) (*Report, error) {
	return p.evictPast(ctx, p.d.Policy().LowWatermarkPercent, Unneeded)
}

// evictPast evicts, when the store's filesystem is fuller than percent
// (0: never), down to the low watermark.
func (p *Policy) evictPast(ctx context.Context, percent int, reason string) (*Report, error) {
	if !p.evicts() || percent == 0 {
		return nil, nil
	}
	total, free, err := p.d.FilesystemSpace()
	if err != nil || total == 0 {
		return nil, err
	}
	used := total - free
	if used*100 <= total*int64(percent) {
		return nil, nil
	}
	low := int64(p.d.Policy().LowWatermarkPercent)
	return p.Evict(ctx, Request{Need: used - total*low/100, Reason: reason, Partial: true})
}

// To evicts until the store holds at most target bytes, each inode once,
// for `weightsnap gc --evict --to`.
func (p *Policy) To(ctx context.Context, target int64, dryRun bool) (*Report, error) {
	return p.Evict(ctx, Request{Need: p.d.UsedBytes() - target, Reason: Manual, DryRun: dryRun, Partial: true})
}

// ToLimits evicts until the store is within its limits, for `weightsnap gc --evict`.
// The limits are max_store_bytes and min_free_bytes.
// Past the high watermark, it evicts down to the low one.
func (p *Policy) ToLimits(ctx context.Context, dryRun bool) (*Report, error) {
	sp := p.d.Policy()
	total, free, err := p.d.FilesystemSpace()
	if err != nil {
		return nil, err
	}
	var need int64
	if sp.MaxStoreBytes > 0 {
		need = max(need, p.d.UsedBytes()-int64(sp.MaxStoreBytes))
	}
	need = max(need, int64(sp.MinFreeBytes)-free)
	if sp.HighWatermarkPercent > 0 && (total-free)*100 > total*int64(sp.HighWatermarkPercent) {
		need = max(need, total-free-total*int64(sp.LowWatermarkPercent)/100)
	}
	return p.Evict(ctx, Request{Need: need, Reason: Manual, DryRun: dryRun, Partial: true})
}

// Watch runs ToWatermark every WatchInterval until ctx ends.
// A condition that lasts logs once when it begins and once when it ends.
// The conditions are a filesystem held past the high watermark and an eviction that fails.
func (p *Policy) Watch(ctx context.Context) {
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	var w watch
	for {
		w.tick(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watch is what Watch logged last: the holders that keep the filesystem
// past the high watermark, and the error the eviction failed with; "" for
// a condition that is not on.
type watch struct {
	held   string
	failed string
}

// tick runs ToWatermark once and logs the conditions that began or ended.
func (w *watch) tick(ctx context.Context, p *Policy) {
	rep, err := p.ToWatermark(ctx)
	failed, held := "", ""
	switch {
	case err != nil:
		failed = err.Error()
	case rep != nil && rep.Freed < rep.Need:
		held = describeHeld(rep.Held)
	}
	logger := log.G(ctx)
	switch {
	case failed != "" && failed != w.failed:
		logger.WithError(err).Warn("store watermark: eviction fails; logged again when it works or fails otherwise")
	case failed == "" && w.failed != "":
		logger.Info("store watermark: eviction works again")
	}
	switch {
	case held != "" && held != w.held:
		logger.WithField("need_bytes", rep.Need).WithField("freed_bytes", rep.Freed).WithField("held", held).
			Warn("store watermark: the filesystem stays past the high watermark, held by what eviction may not take; logged again when it ends or its holders change")
	case held == "" && w.held != "" && failed == "":
		logger.Info("store watermark: the filesystem is no longer held past the high watermark")
	}
	w.failed = failed
	if failed == "" {
		w.held = held
	}
}

// describeHeld names what eviction may not take, largest first.
func describeHeld(held []store.Held) string {
	if len(held) == 0 {
		return "nothing eviction names (the store's bytes are not READY artifacts, or outside the store)"
	}
	parts := make([]string, 0, len(held))
	for _, h := range held {
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", h.ID.Short(), bytefmt.IEC(h.Bytes), h.Why))
	}
	return strings.Join(parts, "; ")
}
