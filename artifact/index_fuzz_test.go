package artifact

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func FuzzDecodeIndex(f *testing.F) {
	data, err := os.ReadFile("testdata/tree-golden.safetensors")
	if err != nil {
		f.Fatal(err)
	}
	e, err := HashFile(bytes.NewReader(data), Binding{Want: FileEntry{File: File{Path: "m.safetensors", Size: int64(len(data))}}})
	if err != nil {
		f.Fatal(err)
	}
	cfg := FileEntry{File: File{Path: "config.json", Size: 2, SHA256: strings.Repeat("a", 64), BLAKE3: strings.Repeat("b", 64)}}
	x := Index{Schema: IndexSchema, ID: MustParseID("sha256:" + strings.Repeat("c", 64)), Files: []FileEntry{cfg, e}}
	two, _ := x.Encode()
	old := e
	old.BLAKE3 = BLAKE3Hex(data)
	x = Index{Schema: IndexSchemaWholeFile, ID: x.ID, Files: []FileEntry{cfg, old}}
	one, _ := x.Encode()
	for _, s := range []string{
		string(two), string(one),
		`{"schema":1,"identity":"","files":[{"path":"../x","size":1,"sha256":"","blake3":""}]}`,
		`{"schema":1,"identity":"","files":[{"path":"b","size":1,"sha256":"","blake3":""},{"path":"a","size":1,"sha256":"","blake3":""}]}`,
		`{"schema":3}`, `{"schema":1,"extra":0}`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		x, err := DecodeIndex(doc)
		if err != nil {
			return
		}
		for i, file := range x.Files {
			if ValidateRelPath(file.Path) != nil || (i > 0 && x.Files[i-1].Path >= file.Path) {
				t.Fatalf("accepted file path %q", file.Path)
			}
			end := file.DataStart
			for _, tn := range file.Tensors {
				if tn.Offset != end || tn.Length < 0 || tn.Offset+tn.Length > file.Size {
					t.Fatalf("accepted tensor %q that does not tile its file", tn.Name)
				}
				end += tn.Length
			}
			if tree, err := EntryTree(file); IsSafetensors(file.Path) && x.Schema == IndexSchema && (err != nil || tree != file.BLAKE3) {
				t.Fatalf("accepted file %q whose BLAKE3 is not its tree", file.Path)
			}
		}
		// An upgraded index is a valid index of the current schema.
		if err := x.Upgrade(); err != nil {
			t.Fatalf("upgrade of an accepted index: %v", err)
		}
		raw, _ := x.Encode()
		if _, err := DecodeIndex(raw); err != nil {
			t.Fatalf("upgraded index refused: %v", err)
		}
	})
}
