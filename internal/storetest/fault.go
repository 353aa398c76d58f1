package storetest

// What the store's fault harnesses (test/crash and test/powercut) share:
// sources with their identity, corruption of a published artifact, the
// fault-enabled child binary, and the comparison of a lease with its source.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// Source is a synthetic checkpoint and its identity.
type Source struct {
	Dir      string
	Src      *artifact.SourceDir
	Identity artifact.Identity
	ID       artifact.ID // Identity's ID; its hex names the artifact's directory
}

// NewSource writes a synthetic checkpoint of about size bytes in shards.
func NewSource(t testing.TB, size int64, shards int, seed uint64) *Source {
	t.Helper()
	dir, src := CheckpointOf(t, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: seed})
	id := Identity(src)
	dg, _ := id.ID()
	return &Source{Dir: dir, Src: src, Identity: id, ID: dg}
}

// Publish publishes s in the domain at root and returns the domain.
func (s *Source) Publish(t testing.TB, root string) *store.Domain {
	t.Helper()
	d := OpenAt(t, root)
	Seed(t, d, s.Src)
	return d
}

// Corrupt flips the last byte of a published artifact's first shard,
// keeping its modes: only a full checksum finds it.
func Corrupt(t testing.TB, root, id string) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(root, "artifacts", id, "*.safetensors"))
	if len(matches) == 0 {
		t.Fatal("no payload to corrupt")
	}
	p := matches[0]
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, fi.Size()-1)
	b[0] ^= 0x5a
	f.WriteAt(b, fi.Size()-1)
	f.Close()
	os.Chmod(p, 0o444)
}

// Child is the harnesses' child (test/crash/child), built once per test
// binary with Tags (comma-separated) into a temporary directory.
type Child struct {
	Tags string

	once sync.Once
	bin  string
	err  error
}

// Path builds the child on first use and returns its path.
func (c *Child) Path(t testing.TB) string {
	t.Helper()
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", "ws-store-child")
		if err != nil {
			c.err = err
			return
		}
		c.bin = filepath.Join(dir, "child")
		out, err := exec.Command("go", "build", "-tags", c.Tags, "-o", c.bin, "github.com/weightsnap/weightsnap/test/crash/child").CombinedOutput()
		if err != nil {
			c.err = fmt.Errorf("build child: %v\n%s", err, out)
		}
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.bin
}

// Remove deletes the built child; a TestMain calls it after the tests.
func (c *Child) Remove() {
	if c.bin != "" {
		os.RemoveAll(filepath.Dir(c.bin))
	}
}

// Data is a lease file's bytes (store.LeaseFile.Data), failing tb when
// they cannot be mapped.
func Data(tb testing.TB, f *store.LeaseFile) []byte {
	tb.Helper()
	data, err := f.Data()
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// SameBytes says whether every file of a lease holds the bytes of the
// source file of the same path.
func SameBytes(l *store.Lease, srcDir string) error {
	for _, f := range l.Files() {
		want, err := os.ReadFile(filepath.Join(srcDir, f.Path))
		if err != nil {
			return err
		}
		data, err := f.Data()
		if err != nil {
			return err
		}
		if !bytes.Equal(data, want) {
			return fmt.Errorf("the lease of %s serves bytes that differ from the source", f.Path)
		}
	}
	return nil
}

// TreeBytes is what the regular files under root occupy by apparent size,
// each inode once: du --apparent-size --bytes of root, less its directories.
func TreeBytes(root string) (int64, error) {
	seen := map[[2]uint64]bool{}
	var n int64
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if k := [2]uint64{uint64(st.Dev), st.Ino}; !seen[k] {
			seen[k] = true
			n += st.Size
		}
		return nil
	})
	return n, err
}

// CheckSettled checks the store d after a crash and the next Open and gc:
// inspect --domain shows nothing denied, invalid or being removed, and
// accounts every byte under the root as TreeBytes counts them.
func CheckSettled(ctx context.Context, d *store.Domain) error {
	r, err := d.InspectDomain(ctx)
	if err != nil {
		return fmt.Errorf("inspect --domain: %w", err)
	}
	if r.Denied.Count+r.Invalid.Count+r.Removing.Count > 0 {
		return fmt.Errorf("after gc the store holds denied %+v, invalid %+v, removing %+v", r.Denied, r.Invalid, r.Removing)
	}
	du, err := TreeBytes(d.Root())
	if err != nil {
		return err
	}
	if du != r.TotalBytes {
		return fmt.Errorf("inspect --domain accounts %d bytes, the root holds %d: %+v", r.TotalBytes, du, r.States)
	}
	return nil
}
