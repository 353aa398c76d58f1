package evict

import (
	"context"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
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
func (p *Policy) Watch(ctx context.Context) {
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	for {
		rep, err := p.ToWatermark(ctx)
		switch {
		case err != nil:
			log.G(ctx).WithError(err).Warn("store watermark: eviction failed")
		case rep != nil && rep.Freed < rep.Need:
			log.G(ctx).WithField("need", rep.Need).WithField("freed", rep.Freed).WithField("held", len(rep.Held)).
				Warn("store watermark: the filesystem stays past the high watermark; what is left is pinned, leased or being built")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
