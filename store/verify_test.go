package store

import (
	"context"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

// countingPacer counts the bytes a check asks to read.
type countingPacer struct {
	mu    sync.Mutex
	bytes int64
}

func (p *countingPacer) WaitN(_ context.Context, n int) error {
	p.mu.Lock()
	p.bytes += int64(n)
	p.mu.Unlock()
	return nil
}

// TestVerifyPacesEachByteOnce: a check paces every payload byte once,
// whether it recomputes the BLAKE3 alone or the sha256 too (a scrub at
// --rate R takes as long as R says).
func TestVerifyPacesEachByteOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := synth.Write(ctx, dir, synth.Options{Size: 3 << 20, Shards: 2, DType: "BF16", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	src, _, err := artifact.ScanSource(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	d := openTestDomain(t)
	l, _, err := d.GetOrBuild(ctx, artifact.PassthroughIdentity(src, "", "0123456789abcdef0123456789abcdef01234567", "", 0, 0), &artifact.Passthrough{Src: src})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		name string
		c    hashCheck
	}{
		{"BLAKE3", hashCheck{}},
		{"BLAKE3 and sha256", hashCheck{sha256: true}},
	} {
		p := &countingPacer{}
		tc.c.pace = p
		if err := verifyHashes(ctx, l.ID, l.Files(), tc.c); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := l.Index.TotalBytes(); p.bytes != want {
			t.Errorf("%s: paced %d bytes, want the payload's %d", tc.name, p.bytes, want)
		}
	}
}
