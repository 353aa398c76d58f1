package staging

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestCopyRangeHashesInOrder: the hash of a copy sees the chunks in file
// order while many copies run at once, with far more readers than cores.
// (The race copyRange once had, a later chunk taking the slot the hasher
// expected an earlier one in, needed a reader descheduled for milliseconds
// at one line; this test did not catch it, the dispatcher rules it out.)
func TestCopyRangeHashesInOrder(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 24*copyChunk+12345)
	r := rand.NewChaCha8([32]byte{7})
	r.Read(data)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	const copies = 16
	var wg sync.WaitGroup
	errs := make([]error, copies)
	sums := make([][]byte, copies)
	for c := range copies {
		wg.Go(func() {
			in, err := os.Open(src)
			if err != nil {
				errs[c] = err
				return
			}
			defer in.Close()
			p := filepath.Join(dir, "dst"+string(rune('a'+c)))
			out, err := os.Create(p)
			if err != nil {
				errs[c] = err
				return
			}
			defer out.Close()
			var direct *os.File // every other copy writes its aligned chunks with O_DIRECT
			if c%2 == 1 {
				if direct = openDirect(p); direct != nil {
					defer direct.Close()
				}
			}
			h := sha256.New()
			errs[c] = copyRange(context.Background(), in, out, direct, 0, int64(len(data)), h, nil)
			sums[c] = h.Sum(nil)
			if got, err := os.ReadFile(p); errs[c] == nil && (err != nil || !bytes.Equal(got, data)) {
				errs[c] = fmt.Errorf("copy %d (direct %v) differs from its source: %v", c, direct != nil, err)
			}
		})
	}
	wg.Wait()
	for c := range copies {
		if errs[c] != nil {
			t.Fatal(errs[c])
		}
		if !bytes.Equal(sums[c], want[:]) {
			t.Fatalf("copy %d hashed its chunks out of order", c)
		}
	}
}
