package store

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// progressRecord is one record of a progress file as a build appends it.
func progressRecord(kind byte, body []byte) []byte {
	rec := append([]byte{kind}, binary.LittleEndian.AppendUint32(nil, uint32(len(body)))...)
	return append(rec, body...)
}

// followProgress parses data as a follower of a build does, the file
// growing: the first cut bytes are on disk at the first look, the rest at
// the second.
func followProgress(t *testing.T, data []byte, cut int) (*Building, error) {
	path := filepath.Join(t.TempDir(), fileProgress)
	if err := os.WriteFile(path, data[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	id, err := testIdentity().ID()
	if err != nil {
		t.Fatal(err)
	}
	b := &Building{id: id, prog: f, verified: map[string][]span{}, pieces: map[pieceRange][][32]byte{},
		files: map[string]*os.File{}, depth: -1}
	err = b.refresh()
	if err == nil && cut < len(data) {
		if _, err := f.Write(data[cut:]); err != nil {
			t.Fatal(err)
		}
		err = b.refresh()
	}
	return b, err
}

// FuzzProgress: the records a follower reads from a growing progress file
// do not depend on where the file was cut between two looks, and every
// length and range in them is bounded before it is used.
func FuzzProgress(f *testing.F) {
	rng := func(off, n uint64, path string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, off)
		return append(binary.LittleEndian.AppendUint64(b, n), path...)
	}
	pieces := append(binary.LittleEndian.AppendUint32(rng(0, 2<<20, "")[:16], 2), make([]byte, 64)...)
	valid := append(progressRecord(recAnnounce, []byte(`{"doc":1}`)), progressRecord(recSource, []byte{2, 0, 0, 0})...)
	valid = append(valid, progressRecord(recVerified, rng(0, 4096, "a.safetensors"))...)
	valid = append(valid, progressRecord(recPieces, append(pieces, "a.safetensors"...))...)
	valid = append(valid, progressRecord(recEnd, nil)...)
	f.Add(valid, uint16(7))
	f.Add(progressRecord(recVerified, rng(1<<63, 1, "x")), uint16(3))
	f.Add([]byte{recAnnounce, 0xff, 0xff, 0xff, 0xff}, uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		whole, werr := followProgress(t, data, len(data))
		split, serr := followProgress(t, data, int(cut)%(len(data)+1))
		if fmt.Sprint(werr) != fmt.Sprint(serr) {
			t.Fatalf("whole: %v; split: %v", werr, serr)
		}
		if !reflect.DeepEqual(whole.doc, split.doc) || whole.depth != split.depth || whole.ended != split.ended ||
			whole.total != split.total || !reflect.DeepEqual(whole.verified, split.verified) || !reflect.DeepEqual(whole.pieces, split.pieces) {
			t.Fatal("a follower cut between two looks read other records")
		}
		for path, spans := range whole.verified {
			for _, s := range spans {
				if s.off < 0 || s.end < s.off {
					t.Fatalf("verified span %+v of %q", s, path)
				}
			}
		}
	})
}
