package fingerprint_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// source writes a small checkpoint: plain files, a hidden file, a
// subdirectory, and a hub-cache style link into blobs/<sha256>. Its files
// are older than the racy window, so their records are trusted.
func source(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "snapshot")
	blobs := filepath.Join(base, "blobs")
	for _, d := range []string{dir, blobs, filepath.Join(dir, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"config.json":             `{"a":1}`,
		"model.safetensors":       "not really safetensors, but bytes",
		"sub/tokenizer.json":      "{}",
		".hidden":                 "skipped",
		"model-2.safetensors.txt": "x",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	blob := []byte("blob content")
	sum := sha256.Sum256(blob)
	blobPath := filepath.Join(blobs, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(blobPath, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "blobs", hex.EncodeToString(sum[:])), filepath.Join(dir, "linked.bin")); err != nil {
		t.Fatal(err)
	}
	storetest.Settle(t, dir)
	return dir
}

func scan(t *testing.T, c *fingerprint.Cache, dir string) *fingerprint.Result {
	t.Helper()
	res, err := c.Scan(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestScanMatchesScanSource(t *testing.T) {
	dir := source(t)
	want, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*fingerprint.Cache{nil, fingerprint.New(""), fingerprint.New(filepath.Join(t.TempDir(), "fp"))} {
		for range 2 { // cold, then warm
			got := scan(t, c, dir)
			if !reflect.DeepEqual(got.Src.Files, want.Files) {
				t.Fatalf("cache %q: fingerprint\n%v\nwant\n%v", c.Dir(), got.Src.Files, want.Files)
			}
		}
	}
}

func TestWarmScanReadsNoSourceByte(t *testing.T) {
	dir := source(t)
	c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
	cold := scan(t, c, dir)
	if cold.Stats.Misses != 4 || cold.Stats.Named != 1 || cold.Stats.HashedBytes == 0 {
		t.Fatalf("cold: %+v", cold.Stats)
	}
	warm := scan(t, c, dir)
	if warm.Stats.Hits != 4 || warm.Stats.Misses != 0 || warm.Stats.HashedBytes != 0 || warm.Stats.Errors != 0 {
		t.Fatalf("warm: %+v", warm.Stats)
	}
}

func records(t *testing.T, c *fingerprint.Cache) []string {
	t.Helper()
	recs, err := filepath.Glob(filepath.Join(c.Dir(), "*.json"))
	if err != nil || len(recs) == 0 {
		t.Fatalf("no records: %v", err)
	}
	return recs
}

func TestCorruptRecordIsRebuilt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"garbage", func([]byte) []byte { return []byte("\x00\x01garbage") }},
		{"empty", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"flipped sha256", func(b []byte) []byte {
			out := []byte(string(b))
			i := len(`{"schema":1,"key":`)
			for ; i < len(out); i++ {
				if string(out[i:i+10]) == `"sha256":"` {
					i += 10
					break
				}
			}
			if out[i] == 'a' {
				out[i] = 'b'
			} else {
				out[i] = 'a'
			}
			return out
		}},
		{"wrong schema", func(b []byte) []byte { return []byte(string(b[:10]) + "2" + string(b[11:])) }},
		{"huge", func([]byte) []byte { return make([]byte, 1<<20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := source(t)
			c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
			want := scan(t, c, dir)
			recs := records(t, c)
			for _, r := range recs {
				raw, _ := os.ReadFile(r)
				if err := os.WriteFile(r, tc.mangle(raw), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := scan(t, c, dir)
			if got.Stats.Rebuilt != len(recs) || got.Stats.Hits != 0 {
				t.Fatalf("after corruption: %+v", got.Stats)
			}
			if !reflect.DeepEqual(got.Src.Files, want.Src.Files) {
				t.Fatal("a corrupt record changed the fingerprint")
			}
			again := scan(t, c, dir)
			if again.Stats.Hits != len(recs) || again.Stats.Rebuilt != 0 {
				t.Fatalf("rebuilt records not used: %+v", again.Stats)
			}
		})
	}
}

func TestChangedFileInvalidatesRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, p string)
		same   bool // content unchanged
	}{
		{"touch mtime", func(t *testing.T, p string) {
			if err := os.Chtimes(p, time.Now(), time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"rewrite same size", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte(`{"a":2}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"replace inode", func(t *testing.T, p string) {
			raw, _ := os.ReadFile(p)
			os.Remove(p)
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := source(t)
			c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
			before := scan(t, c, dir)
			tc.change(t, filepath.Join(dir, "config.json"))
			if ch := before.Changed(); len(ch) != 1 || ch[0] != "config.json" {
				t.Fatalf("Changed() = %v", ch)
			}
			storetest.Settle(t, dir)
			after := scan(t, c, dir)
			if after.Stats.Misses != 1 || after.Stats.Hits != 3 {
				t.Fatalf("after the change: %+v", after.Stats)
			}
			fresh, _, _ := artifact.ScanSource(context.Background(), dir)
			if !reflect.DeepEqual(after.Src.Files, fresh.Files) {
				t.Fatal("stale fingerprint after a change")
			}
			if same := reflect.DeepEqual(after.Src.Files, before.Src.Files); same != tc.same {
				t.Fatalf("fingerprint equal to before: %v, want %v", same, tc.same)
			}
			if again := scan(t, c, dir); again.Stats.Hits != 4 {
				t.Fatalf("record not refreshed: %+v", again.Stats)
			}
		})
	}
}

func TestCacheFailureHashesDirectly(t *testing.T) {
	dir := source(t)
	want, _, _ := artifact.ScanSource(context.Background(), dir)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{"cache dir is a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fp")
			os.WriteFile(p, nil, 0o644)
			return p
		}},
		{"record is a directory", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fp")
			c := fingerprint.New(p)
			scan(t, c, dir)
			for _, r := range records(t, c) {
				os.Remove(r)
				os.Mkdir(r, 0o755)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fingerprint.New(tc.setup(t))
			got := scan(t, c, dir)
			if got.Stats.Errors == 0 || got.Stats.Hits != 0 {
				t.Fatalf("stats %+v", got.Stats)
			}
			if !reflect.DeepEqual(got.Src.Files, want.Files) {
				t.Fatal("fingerprint differs when the cache fails")
			}
		})
	}
}

func TestRacyRecordIsNotTrusted(t *testing.T) {
	dir := t.TempDir()
	c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
	p := filepath.Join(dir, "a.bin")
	os.WriteFile(p, []byte("fresh"), 0o644)
	// A file changed at or after its hash began: its record is racy.
	future := time.Now().Add(time.Hour)
	os.Chtimes(p, future, future)
	scan(t, c, dir)
	if got := scan(t, c, dir); got.Stats.Hits != 0 || got.Stats.Misses != 1 {
		t.Fatalf("racy record trusted: %+v", got.Stats)
	}
	// Changed well before the hash: the new record is trusted.
	past := time.Now().Add(-time.Hour)
	os.Chtimes(p, past, past) // ctime is now
	storetest.Settle(t, dir)
	scan(t, c, dir)
	if got := scan(t, c, dir); got.Stats.Hits != 1 {
		t.Fatalf("record written after the racy window not trusted: %+v", got.Stats)
	}
}

func TestLookupThenRecordFromACopy(t *testing.T) {
	dir := source(t)
	want, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
	started := time.Now().UnixNano()
	cold, err := c.Lookup(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if cold.Src.Complete() || cold.Stats.HashedBytes != 0 || cold.Stats.Misses != 4 {
		t.Fatalf("cold lookup hashed or completed: %+v", cold.Stats)
	}
	// A single-pass copy learned every file's sha256; one entry is wrong
	// in path, so that file stays unrecorded.
	var entries []artifact.FileEntry
	for _, f := range want.Files {
		entries = append(entries, artifact.FileEntry{File: artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}})
	}
	entries[0].Path = "elsewhere"
	c.Record(context.Background(), cold, entries, started) // synchronous, of files settled before started
	warm, err := c.Lookup(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if warm.Stats.Hits != 3 || warm.Stats.Misses != 1 {
		t.Fatalf("after Record: %+v, want 3 hits and the unrecorded file missing", warm.Stats)
	}
	for i, f := range warm.Src.Files {
		if f.SHA256 != "" && f.SHA256 != want.Files[i].SHA256 {
			t.Fatalf("%s: recorded %s, want %s", f.Path, f.SHA256, want.Files[i].SHA256)
		}
	}
}
