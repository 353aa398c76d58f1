package evict_test

import (
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/store"
)

func TestCheckPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(*store.Policy)
		wantError bool
	}{
		{name: "default", edit: func(*store.Policy) {}},
		{name: "off", edit: func(p *store.Policy) { p.Eviction = evict.Off }},
		{name: "unset", edit: func(p *store.Policy) { p.Eviction = "" }},
		{name: "unknown mode", edit: func(p *store.Policy) { p.Eviction = "fifo" }, wantError: true},
		{name: "watermark past 100", edit: func(p *store.Policy) { p.HighWatermarkPercent = 101 }, wantError: true},
		{name: "negative watermark", edit: func(p *store.Policy) { p.LowWatermarkPercent = -1 }, wantError: true},
		{name: "low above high", edit: func(p *store.Policy) { p.HighWatermarkPercent, p.LowWatermarkPercent = 50, 60 }, wantError: true},
		{name: "low above a high of 0", edit: func(p *store.Policy) { p.HighWatermarkPercent, p.LowWatermarkPercent = 0, 60 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := store.DefaultPolicy()
			tc.edit(&p)
			err := evict.CheckPolicy(p)
			if tc.wantError != (err != nil) || (err != nil && !errdefs.IsInvalidArgument(err)) {
				t.Fatalf("CheckPolicy: %v, want an error %v", err, tc.wantError)
			}
		})
	}
}
