package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

// validMeta publishes a small artifact and returns its metadata files.
func validMeta(t testing.TB) (ready, manifest, index []byte) {
	d, err := Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	identity := testIdentity()
	id, _ := identity.ID()
	b, _ := d.newBuild(context.Background(), identity, id, id.Hex())
	w, _ := b.Create("weights.bin", 4)
	w.Write([]byte("same"))
	w.Close()
	if err := b.publish(context.Background(), "test", farFuture()); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join(d.path(dirArtifacts, id.Hex()), name))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	return read(fileReady), read(fileManifest), read(fileIndex)
}

func FuzzDecodeReady(f *testing.F) {
	ready, _, _ := validMeta(f)
	for _, s := range [][]byte{ready, []byte(`{}`), []byte(`{"schema":1,"x":2}`), []byte(`{"schema":1}{}`), []byte(`[`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, err := DecodeReady(doc)
		if err == nil && r.Schema != ReadySchema {
			t.Fatalf("accepted schema %d", r.Schema)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	_, manifest, _ := validMeta(f)
	f.Add(manifest)
	f.Add([]byte(`{"schema":1,"identity":{},"files":[]}`))
	f.Add([]byte(`{"schema":1,"files":[{"path":"../x","size":1}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		m, err := DecodeManifest(doc)
		if err != nil {
			return
		}
		var total int64
		for _, file := range m.Files {
			if artifact.ValidateRelPath(file.Path) != nil || file.Size < 0 {
				t.Fatalf("accepted a bad file %+v", file)
			}
			total += file.Size
		}
		if total != m.TotalBytes {
			t.Fatalf("accepted total %d for files summing to %d", m.TotalBytes, total)
		}
		if dg, _ := m.Identity.ID(); dg != m.ID {
			t.Fatal("accepted an identity digest that does not match")
		}
	})
}

// TestMalformedMetadataIsDenied writes broken metadata into a published
// artifact (resealing READY.json where needed, so the parsers themselves
// are reached) and checks that lookup denies it with a typed reason.
func TestMalformedMetadataIsDenied(t *testing.T) {
	ready, manifest, index := validMeta(t)
	var r Ready
	json.Unmarshal(ready, &r)
	reseal := func(name string, doc []byte) map[string][]byte {
		rr := r
		switch name {
		case fileManifest:
			rr.ManifestSHA256 = sha256Hex(doc)
		case fileIndex:
			rr.IndexSHA256 = sha256Hex(doc)
		}
		raw, _ := json.Marshal(rr)
		return map[string][]byte{name: doc, fileReady: raw}
	}
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		file  string
	}{
		{"truncated READY", map[string][]byte{fileReady: ready[:len(ready)/2]}, fileReady},
		{"READY with an unknown field", map[string][]byte{fileReady: []byte(`{"schema":1,"bogus":true}`)}, fileReady},
		{"manifest not sealed by READY", map[string][]byte{fileManifest: append(manifest, ' ')}, fileManifest},
		{"manifest with an unknown field", reseal(fileManifest, []byte(`{"schema":1,"extra":1}`)), fileManifest},
		{"manifest total mismatch", reseal(fileManifest, []byte(string(manifest[:len(manifest)-1])+`,"total_bytes":9}`)), fileManifest},
		{"index path escapes", reseal(fileIndex, []byte(`{"schema":1,"identity":"x","files":[{"path":"../weights.bin","size":4,"sha256":"","blake3":""}]}`)), fileIndex},
		{"index not JSON", reseal(fileIndex, []byte(`{`)), fileIndex},
		{"index tensor outside the file", reseal(fileIndex, []byte(string(index[:len(index)-3])+`,"tensors":[{"name":"t","dtype":"U8","shape":[9],"offset":0,"length":9,"blake3":""}]}]}`)), fileIndex},
	} {
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/warm=%v", tc.name, warm), func(t *testing.T) {
				d, err := Open(context.Background(), t.TempDir(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := publishBytes(t, d, testIdentity(), []byte("same")); err != nil {
					t.Fatal(err)
				}
				id, _ := testIdentity().ID()
				if warm { // the valid metadata decoded (and kept) before it was broken
					l, err := d.Lookup(context.Background(), id, ManifestAndMetadata)
					if err != nil {
						t.Fatal(err)
					}
					l.Close()
				}
				dir := d.path(dirArtifacts, id.Hex())
				os.Chmod(dir, 0o755)
				for name, doc := range tc.files {
					os.Chmod(filepath.Join(dir, name), 0o644)
					if err := os.WriteFile(filepath.Join(dir, name), doc, 0o444); err != nil {
						t.Fatal(err)
					}
					os.Chmod(filepath.Join(dir, name), 0o444)
				}
				os.Chmod(dir, dirHardened)
				_, err = d.Lookup(context.Background(), id, ManifestAndMetadata)
				var ie *InvalidError
				if !errors.As(err, &ie) || ie.File != tc.file {
					t.Fatalf("lookup: %v, want an InvalidError naming %s", err, tc.file)
				}
				var de *DeniedError
				if _, err := d.Lookup(context.Background(), id, ManifestAndMetadata); !errors.As(err, &de) {
					t.Fatalf("second lookup: %v, want denied", err)
				}
			})
		}
	}
}

// TestLookupDecodesMetadataOncePerContent: lookups of an artifact share one
// decoding of its manifest and index while their bytes stay the same; new
// bytes (resealed in READY.json) are decoded again.
func TestLookupDecodesMetadataOncePerContent(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := publishBytes(t, d, testIdentity(), []byte("same")); err != nil {
		t.Fatal(err)
	}
	id, _ := testIdentity().ID()
	lookup := func() *Lease {
		t.Helper()
		l, err := d.Lookup(ctx, id, ManifestAndMetadata)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return l
	}
	first, second := lookup(), lookup()
	if first.Manifest != second.Manifest || first.Index != second.Index {
		t.Fatal("the same metadata bytes decoded twice")
	}
	// The same manifest with other bytes (a trailing newline), resealed.
	dir := d.path(dirArtifacts, id.Hex())
	man, err := os.ReadFile(filepath.Join(dir, fileManifest))
	if err != nil {
		t.Fatal(err)
	}
	man = append(man, '\n')
	r := *first.Ready
	r.ManifestSHA256 = sha256Hex(man)
	ready, _ := json.Marshal(r)
	os.Chmod(dir, 0o755)
	for name, doc := range map[string][]byte{fileManifest: man, fileReady: ready} {
		os.Chmod(filepath.Join(dir, name), 0o644)
		if err := os.WriteFile(filepath.Join(dir, name), doc, 0o444); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), 0o444)
	}
	os.Chmod(dir, dirHardened)
	third := lookup()
	if third.Manifest == first.Manifest {
		t.Fatal("new manifest bytes were not decoded")
	}
	if third.Manifest.ID != id || len(third.Manifest.Files) != len(first.Manifest.Files) {
		t.Fatalf("manifest decoded again: %+v", third.Manifest)
	}
}
