package store

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestFailedWriteRecordsNothing: a file whose writes fail records no range
// as written and checked (a seeding build offers what it records to peers),
// and the failure reaches the writer.
func TestFailedWriteRecordsNothing(t *testing.T) {
	data, b := keptFile(t)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path) // read-only: every pwrite fails
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recorded [][2]int64
	var mu sync.Mutex
	w, err := newFileWriter(b, f, &sync.Pool{}, writerOptions{onChecked: func(off, n int64) error {
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, [2]int64{off, n})
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, werr := w.Write(data)
	cerr := w.Close()
	if werr == nil && cerr == nil {
		t.Fatal("writes into a read-only file: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recorded) != 0 {
		t.Fatalf("failed writes recorded as written and checked: %v", recorded)
	}
}
