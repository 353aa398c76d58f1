package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSourceSeesAChange(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("weights"), 0o644)
	sum, st, err := HashSource(context.Background(), p, "f", make([]byte, 4))
	want := sha256.Sum256([]byte("weights"))
	if err != nil || sum != hex.EncodeToString(want[:]) || st.Size != 7 {
		t.Fatalf("HashSource: %s %+v %v", sum, st, err)
	}
	s, err := OpenSource(p, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Unchanged(); err != nil {
		t.Fatalf("an untouched file: %v", err)
	}
	os.WriteFile(p, []byte("weights!"), 0o644) // same inode, new size and times
	var sm *SourceMismatchError
	if err := s.Unchanged(); !errors.As(err, &sm) || sm.Path != "f" {
		t.Fatalf("a changed file: %v, want a SourceMismatchError", err)
	}
}
