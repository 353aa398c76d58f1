package evict

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/containerd/log"
	"github.com/sirupsen/logrus"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
)

// TestWatchLogsBeginAndEnd: a filesystem held past the high watermark by
// pins logs once when it begins, naming the pins, stays quiet while it
// lasts, and logs once when it ends.
func TestWatchLogsBeginAndEnd(t *testing.T) {
	const mib = 1 << 20
	root := testenv.Tmpfs(t, "16m")
	var buf bytes.Buffer
	logger := logrus.New()
	logger.SetOutput(&buf)
	ctx := log.WithLogger(context.Background(), logrus.NewEntry(logger))
	policy := store.DefaultPolicy()
	policy.HighWatermarkPercent, policy.LowWatermarkPercent = 50, 25
	d, err := store.Open(ctx, root, &policy)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	var ids []artifact.ID
	for i := range 3 {
		src, identity := storetest.Model(t, 3*mib, uint64(800+i))
		id, err := storetest.Build(ctx, d, src, identity)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Pin(ctx, id, store.Pin{By: store.PinByCLI, Reason: "golden"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var w watch
	for _, step := range []struct {
		name   string
		before func()
		says   []string // each a line logged at this tick; none when empty
	}{
		{name: "held by the pins", says: []string{"stays past the high watermark", ids[0].Short(), "pinned by cli"}},
		{name: "still held", before: func() {}},
		{name: "the pins go", before: func() {
			for _, id := range ids {
				if _, err := d.Unpin(ctx, id, store.PinByCLI); err != nil {
					t.Fatal(err)
				}
			}
		}, says: []string{"no longer held past the high watermark"}},
		{name: "under the watermark", before: func() {}},
	} {
		if step.before != nil {
			step.before()
		}
		buf.Reset()
		w.tick(ctx, p)
		var lines []string // the watch's own; the evictions log theirs
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "store watermark") {
				lines = append(lines, l)
			}
		}
		if len(step.says) == 0 {
			if len(lines) != 0 {
				t.Errorf("%s: logged %q, want nothing", step.name, lines)
			}
			continue
		}
		if len(lines) != 1 {
			t.Errorf("%s: logged %q, want one line", step.name, lines)
			continue
		}
		got := lines[0]
		for _, want := range step.says {
			if !strings.Contains(got, want) {
				t.Errorf("%s: logged %q, want it to say %q", step.name, got, want)
			}
		}
	}
}
