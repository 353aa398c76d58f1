package artifact

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"sort"
	"testing"

	"github.com/zeebo/blake3"
)

// goldenTree is the tensor-tree BLAKE3 of testdata/tree-golden.safetensors:
// a change of the tree's definition changes it.
const goldenTree = "7449957db5926ddbea1a28633e1cedb19667e6cc23693584e8b9a5036b327b2e"

// treeOf computes the tensor-tree digest of a safetensors file without the
// package's reader or hasher: the length prefix and JSON header read with
// encoding/json, the tensors' byte ranges sorted by offset, each range and
// the header region hashed on its own, then the digests hashed in order.
func treeOf(t *testing.T, data []byte) string {
	t.Helper()
	n := binary.LittleEndian.Uint64(data[:8])
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	type span struct{ begin, end uint64 }
	var spans []span
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Offsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		spans = append(spans, span{e.Offsets[0], e.Offsets[1]})
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].begin < spans[j].begin || spans[i].begin == spans[j].begin && spans[i].end < spans[j].end
	})
	var cat bytes.Buffer
	head := blake3.Sum256(data[:8+n])
	cat.Write(head[:])
	for _, s := range spans {
		sum := blake3.Sum256(data[8+n+s.begin : 8+n+s.end])
		cat.Write(sum[:])
	}
	tree := blake3.Sum256(cat.Bytes())
	return hex.EncodeToString(tree[:])
}

func TestTreeDigestGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/tree-golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	want := treeOf(t, data)
	if want != goldenTree {
		t.Fatalf("independent tree digest %s, golden %s", want, goldenTree)
	}
	e, err := HashFile(bytes.NewReader(data), Binding{Want: FileEntry{File: File{Path: "golden.safetensors", Size: int64(len(data))}}})
	if err != nil {
		t.Fatal(err)
	}
	if e.BLAKE3 != want {
		t.Fatalf("hasher's tree digest %s, independently %s", e.BLAKE3, want)
	}
	if tree, err := EntryTree(e); err != nil || tree != want {
		t.Fatalf("EntryTree gives %s (%v), want %s", tree, err, want)
	}
	if e.BLAKE3 == BLAKE3Hex(data) {
		t.Fatal("the tree digest equals the whole-file BLAKE3")
	}
}
