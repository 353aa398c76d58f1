package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// roomRecorder is a RoomMaker that records what it was asked and answers refuse.
type roomRecorder struct {
	needs  []int64
	refuse error
}

func (r *roomRecorder) MakeRoom(_ context.Context, need int64, _ artifact.ID) error {
	r.needs = append(r.needs, need)
	return r.refuse
}

// TestBuildMakesRoomOnENOSPC: a build that meets a full filesystem, in its
// preallocation or a write, asks the RoomMaker for room and runs again; when
// nothing can be freed it fails with a capacity error that names what holds
// the rest of the filesystem.
func TestBuildMakesRoomOnENOSPC(t *testing.T) {
	ctx := context.Background()
	enospc := fmt.Errorf("preallocate model.safetensors: %w", unix.ENOSPC)
	for _, tc := range []struct {
		name   string
		fail   func(d *Domain) error
		refuse error
	}{
		{"preallocate", func(d *Domain) error { return (&build{d: d}).preallocFailed(enospc, 1<<40) }, nil},
		{"write", func(*Domain) error { return noSpace(unix.ENOSPC) }, nil},
		{"nothing to evict", func(*Domain) error { return noSpace(unix.ENOSPC) },
			&CapacityError{Limit: "eviction", Need: 1, Checked: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openTestDomain(t)
			rm := &roomRecorder{refuse: tc.refuse}
			d.SetRoomMaker(rm)
			runs := 0
			_, err := d.buildWithRoom(ctx, artifact.ID{}, func() (*Lease, error) {
				if runs++; runs == 1 {
					return nil, tc.fail(d)
				}
				return nil, nil
			})
			if len(rm.needs) != 1 || rm.needs[0] <= 0 {
				t.Fatalf("the RoomMaker was asked %v, want once for some bytes", rm.needs)
			}
			if tc.refuse == nil {
				if err != nil || runs != 2 {
					t.Fatalf("build: %v after %d runs, want success on the second", err, runs)
				}
				return
			}
			var ce *CapacityError
			if !errors.As(err, &ce) || !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "outside the store") {
				t.Fatalf("build: %v, want a capacity error naming what holds the filesystem", err)
			}
		})
	}
}
