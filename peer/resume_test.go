package peer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"

	"github.com/weightsnap/weightsnap/store"
)

// TestFetchContinuesAPartlyWrittenFile: a fetch of a one-file artifact
// cancelled half way keeps the units it verified; the next fetch checks
// them against the manifest from the disk, fetches only the others (and
// any kept unit whose bytes changed), says what it reused, and the
// artifact verifies.
func TestFetchContinuesAPartlyWrittenFile(t *testing.T) {
	const size = 32 << 20
	src, id := storetest.Seeded(t, size, 1)
	// The cancelled fetch's session may still count at the server for an
	// instant when the next one starts: room for both.
	_, addr := serve(t, src, ServerConfig{MaxChildren: 4})
	for _, tc := range []struct {
		name    string
		corrupt bool
	}{{"kept units", false}, {"a kept unit changed on disk", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dst := storetest.Open(t)
			ctx, cancel := context.WithCancel(context.Background())
			_, _, err := Fetch(ctx, dst, []string{addr}, digestOf(t, id), FetchOptions{Rails: 1, Progress: killAt(size/2, cancel)})
			var ie *store.InterruptedError
			if !errors.Is(err, context.Canceled) || !errors.As(err, &ie) || ie.Kept < size/4 {
				t.Fatalf("cancelled fetch: %v (%+v)", err, ie)
			}
			if tc.corrupt {
				m, _ := filepath.Glob(filepath.Join(dst.Root(), "tmp", "*", "*.safetensors"))
				if len(m) != 1 {
					t.Fatalf("kept files %v", m)
				}
				f, err := os.OpenFile(m[0], os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 1)
				f.ReadAt(b, 1<<20)
				b[0] ^= 0xff
				f.WriteAt(b, 1<<20)
				f.Close()
			}
			l, rep, err := Fetch(context.Background(), dst, []string{addr}, digestOf(t, id), FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			t.Logf("reused %d of %d bytes, fetched %d", rep.Reused, rep.Bytes, rep.Fetched)
			if rep.ResumedFiles != 1 || rep.Reused < size/4 || rep.Reused+rep.Fetched != rep.Bytes {
				t.Fatalf("report %+v", rep)
			}
			verifyFull(t, dst, l.ID)
		})
	}
}
