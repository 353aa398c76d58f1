package evict

import (
	"context"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// MakeRoom implements store.RoomMaker: a build's room, all or nothing.
// With eviction off it refuses with a *store.CapacityError that says so.
func (p *Policy) MakeRoom(ctx context.Context, need int64, except artifact.ID) error {
	if !p.evicts() {
		return &store.CapacityError{Limit: "eviction", Need: need, Checked: true, Eviction: Off}
	}
	_, err := p.Evict(ctx, Request{Need: need, Reason: Capacity, Except: except})
	return err
}

var _ store.RoomMaker = (*Policy)(nil)
