package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

// shardsEncoding is the encoding of a WeightManifest's shards on the wire
// (docs/formats.md); the Go types may change, these bytes may not.
const shardsEncoding = `[{"name":"a.safetensors","size":24,"sha256":"` + "2222222222222222222222222222222222222222222222222222222222222222" +
	`","blake3":"3333333333333333333333333333333333333333333333333333333333333333","data_start":16,"header":"CAAAAAAAAAB7fSAgICAgIA==",` +
	`"header_blake3":"4444444444444444444444444444444444444444444444444444444444444444",` +
	`"tensors":[{"name":"w","dtype":"BF16","shape":[2,2],"offset":16,"length":8,"blake3":"5555555555555555555555555555555555555555555555555555555555555555"}]},` +
	`{"name":"config.json","size":2,"sha256":"6666666666666666666666666666666666666666666666666666666666666666","blake3":"7777777777777777777777777777777777777777777777777777777777777777"}]`

func pinnedShards() []WeightShard {
	hex := func(c string) string { return strings.Repeat(c, 64) }
	shards := make([]WeightShard, 2)
	st := &shards[0]
	st.Path, st.Size, st.SHA256, st.BLAKE3 = "a.safetensors", 24, hex("2"), hex("3")
	st.DataStart, st.Header, st.HeaderBLAKE3 = 16, []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      "), hex("4")
	st.Tensors = []artifact.TensorEntry{{Name: "w", DType: "BF16", Shape: []int64{2, 2}, Offset: 16, Length: 8, BLAKE3: hex("5")}}
	cfg := &shards[1]
	cfg.Path, cfg.Size, cfg.SHA256, cfg.BLAKE3 = "config.json", 2, hex("6"), hex("7")
	return shards
}

func TestWeightShardEncoding(t *testing.T) {
	shards := pinnedShards()
	raw, err := json.Marshal(shards)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != shardsEncoding {
		t.Fatalf("shard encoding changed:\n got %s\nwant %s", raw, shardsEncoding)
	}
	var back []WeightShard
	if err := artifact.DecodeStrictJSON(bytes.NewReader(raw), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, shards) {
		t.Fatalf("decoded %+v, want %+v", back, shards)
	}
}

// TestWeightShardStrict: a shard or tensor with a field the wire does not
// name, or with the store's name for the path, is refused.
func TestWeightShardStrict(t *testing.T) {
	for _, doc := range []string{
		strings.Replace(shardsEncoding, `"data_start":16,`, `"data_start":16,"extra":1,`, 1),
		strings.Replace(shardsEncoding, `"offset":16,`, `"offset":16,"extra":1,`, 1),
		strings.Replace(shardsEncoding, `"name":"config.json"`, `"path":"config.json"`, 1),
	} {
		var back []WeightShard
		if err := artifact.DecodeStrictJSON(strings.NewReader(doc), &back); err == nil || !strings.Contains(err.Error(), `unknown field "`) {
			t.Errorf("%s: err %v, want an unknown field", doc, err)
		}
	}
}

// A building artifact's depth is bounded, and a READY one has none.
func TestManifestDepth(t *testing.T) {
	var base WeightManifest
	if err := json.Unmarshal(fuzzManifest(t), &base); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		building bool
		depth    int
		ok       bool
	}{
		{false, 0, true}, {true, 0, true}, {true, -1, true}, {true, artifact.MaxDepth, true},
		{true, -2, false}, {true, artifact.MaxDepth + 1, false}, {false, 1, false}, {false, -1, false},
	} {
		m := base
		m.Building, m.Depth = tc.building, tc.depth
		raw, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeManifest(raw)
		if (err == nil) != tc.ok {
			t.Fatalf("building %t depth %d: %v, want ok %t", tc.building, tc.depth, err, tc.ok)
		}
		if err == nil && (got.Building != tc.building || got.Depth != tc.depth) {
			t.Fatalf("building %t depth %d decoded as %t %d", tc.building, tc.depth, got.Building, got.Depth)
		}
	}
}

// A piece size is a power of two from 1 KiB to MaxPieceSize, or none.
func TestManifestPieceSize(t *testing.T) {
	var base WeightManifest
	if err := json.Unmarshal(fuzzManifest(t), &base); err != nil {
		t.Fatal(err)
	}
	for size, ok := range map[int64]bool{0: true, 1024: true, 1 << 20: true, MaxPieceSize: true,
		-1024: false, 512: false, 3 << 20: false, 2 * MaxPieceSize: false} {
		m := base
		m.PieceSize = size
		raw, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeManifest(raw)
		if (err == nil) != ok || (err == nil && got.PieceSize != size) {
			t.Fatalf("piece size %d: %+v, %v; want ok %t", size, got, err, ok)
		}
	}
}
