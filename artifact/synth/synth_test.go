package synth_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

func write(t *testing.T, opts synth.Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := synth.Write(context.Background(), dir, opts); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDeterministicAndValid(t *testing.T) {
	opts := synth.Options{Size: 3 << 20, Shards: 3, DType: "BF16", Seed: 5}
	a, b := write(t, opts), write(t, opts)
	opts.Seed = 6
	c := write(t, opts)
	files, _ := filepath.Glob(filepath.Join(a, "*"))
	if len(files) != 5 { // config, index, three shards
		t.Fatalf("%d files: %v", len(files), files)
	}
	var total int64
	for _, fa := range files {
		name := filepath.Base(fa)
		ra, _ := os.ReadFile(fa)
		rb, _ := os.ReadFile(filepath.Join(b, name))
		rc, _ := os.ReadFile(filepath.Join(c, name))
		if !bytes.Equal(ra, rb) {
			t.Fatalf("%s differs between two runs with the same seed", name)
		}
		if !artifact.IsSafetensors(name) {
			continue
		}
		if bytes.Equal(ra, rc) {
			t.Fatalf("%s is the same for another seed", name)
		}
		if _, err := artifact.ReadHeader(bytes.NewReader(ra), int64(len(ra))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		total += int64(len(ra))
	}
	if total < 3<<20 || total > 4<<20 {
		t.Fatalf("shards hold %d bytes for a 3 MiB request", total)
	}
}

func TestRejectsBadOptions(t *testing.T) {
	for _, o := range []synth.Options{
		{Size: 1 << 20, Shards: 1, DType: "F4"},
		{Size: 1 << 20, Shards: 0, DType: "BF16"},
		{Size: 0, Shards: 1, DType: "BF16"},
		{Size: 1 << 20, Shards: 1, DType: "nope"},
	} {
		if err := synth.Write(context.Background(), t.TempDir(), o); err == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
}
