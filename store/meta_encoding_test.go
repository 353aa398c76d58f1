package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

// manifestFilesEncoding is the encoding of the files of manifest.json
// (docs/formats.md); the Go types may change, these bytes may not.
const manifestFilesEncoding = `[{"path":"a.safetensors","size":24,"sha256":"` + "2222222222222222222222222222222222222222222222222222222222222222" +
	`","blake3":"3333333333333333333333333333333333333333333333333333333333333333"},` +
	`{"path":"config.json","size":2,"sha256":"6666666666666666666666666666666666666666666666666666666666666666","blake3":"7777777777777777777777777777777777777777777777777777777777777777"}]`

func TestManifestFileEncoding(t *testing.T) {
	var m Manifest
	m.Files = slices.Grow(m.Files, 2)[:2]
	m.Files[0].Path, m.Files[0].Size, m.Files[0].SHA256, m.Files[0].BLAKE3 = "a.safetensors", 24, strings.Repeat("2", 64), strings.Repeat("3", 64)
	m.Files[1].Path, m.Files[1].Size, m.Files[1].SHA256, m.Files[1].BLAKE3 = "config.json", 2, strings.Repeat("6", 64), strings.Repeat("7", 64)
	raw, err := json.Marshal(m.Files)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != manifestFilesEncoding {
		t.Fatalf("manifest files encoding changed:\n got %s\nwant %s", raw, manifestFilesEncoding)
	}
	back := m.Files[:0:0]
	if err := artifact.DecodeStrictJSON(bytes.NewReader(raw), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m.Files) {
		t.Fatalf("decoded %+v, want %+v", back, m.Files)
	}
}
