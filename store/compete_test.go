package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// publishBytes publishes one payload file through a build of its own,
// without the build lock, as two uncoordinated publishers would.
func publishBytes(t *testing.T, d *Domain, identity artifact.Identity, data []byte) error {
	t.Helper()
	id, _ := identity.ID()
	b, err := d.newBuild(context.Background(), identity, id, id.Hex())
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Create("weights.bin", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	err = b.publish(context.Background(), "test", farFuture())
	if err != nil {
		b.abort()
	}
	return err
}

// identityShort is the short form of an identity that messages name.
func identityShort(t *testing.T, identity artifact.Identity) string {
	t.Helper()
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id.Short()
}

func testIdentity() artifact.Identity {
	return artifact.Identity{Schema: artifact.IdentitySchema,
		Model:          artifact.Model{Revision: "0123456789abcdef0123456789abcdef01234567", Source: []artifact.SourceFile{{Path: "weights.bin", Size: 4, SHA256: "9f64a747e1b97f131fabb6b447296c9b6f0201e79fb3c5356e6c77e89b6a806a"}}},
		Component:      "all",
		Representation: artifact.Representation{DType: "source"},
		Layout:         artifact.Layout{Name: "source"},
		Producer:       artifact.ProducerRef{Name: "test", Version: "1", Fingerprint: "test", ManifestSchema: 1, RestorerSchema: 1}}
}

func TestCompetingPublishers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second []byte
		want   error
	}{
		{"byte-identical content: both succeed", []byte("same"), nil},
		{"other content: identity collision", []byte("diff"), errdefs.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Open(context.Background(), t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			identity := testIdentity()
			if err := publishBytes(t, d, identity, []byte("same")); err != nil {
				t.Fatalf("first publisher: %v", err)
			}
			err = publishBytes(t, d, identity, tc.second)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), "identity collision: artifact "+identityShort(t, identity)))) {
				t.Fatalf("second publisher: %v, want %v", err, tc.want)
			}
			ids, _ := d.ids()
			tmp, _ := os.ReadDir(d.path(dirTmp))
			if len(ids) != 1 || len(tmp) != 0 {
				t.Fatalf("%d artifacts and %d temp entries, want 1 and 0", len(ids), len(tmp))
			}
			l, err := d.Lookup(context.Background(), ids[0], FullChecksum)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if data, err := l.Files()[0].Data(); err != nil || string(data) != "same" {
				t.Fatalf("the first publication was replaced: %q (%v)", data, err)
			}
		})
	}
}

func farFuture() time.Time { return time.Now().Add(time.Hour) }

// TestReadFailuresAreNotFindings: an I/O failure of the store while reading
// an entry is a retryable storage failure, never a reason to deny or
// quarantine; a missing or malformed file is a finding about the entry.
func TestReadFailuresAreNotFindings(t *testing.T) {
	for _, tc := range []struct {
		err     error
		storage bool
	}{
		{unix.EIO, true}, {unix.EMFILE, true}, {unix.ENOMEM, true}, {unix.ESTALE, true},
		{unix.ENOENT, false}, {unix.ELOOP, false}, {unix.EXDEV, false}, {errors.New("size 3, index says 4"), false},
	} {
		err := readFailure(artifact.MustParseID("sha256:"+strings.Repeat("a", 64)), "f", fmt.Errorf("open: %w", tc.err))
		if got := strings.HasPrefix(err.Error(), "store read artifact "); got != tc.storage || IsInvalid(err) == tc.storage {
			t.Fatalf("%v: storage failure %v, invalid %v; want storage %v", tc.err, got, IsInvalid(err), tc.storage)
		}
		if tc.storage && !errdefs.IsUnavailable(err) { // unavailable is retryable
			t.Fatalf("%v: not retryable", tc.err)
		}
	}
}
