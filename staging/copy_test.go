package staging

import (
	"bytes"
	"context"
	"crypto/sha256"
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
			out, err := os.Create(filepath.Join(dir, "dst"+string(rune('a'+c))))
			if err != nil {
				errs[c] = err
				return
			}
			defer out.Close()
			h := sha256.New()
			errs[c] = copyRange(context.Background(), in, out, 0, int64(len(data)), h, nil)
			sums[c] = h.Sum(nil)
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
