package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// The wire readers are fuzzed as the program uses them: reading a stream
// that arrives in pieces split at random points. Each target checks that
// the split changes nothing (same value or same error as reading the bytes
// whole), that no reader panics or allocates past its bound, and, where
// there is an encoder, that what was read encodes back to the bytes taken.

// splitReader hands out data in pieces of pseudo-random sizes, 1 to 64 bytes.
type splitReader struct {
	data []byte
	rng  *rand.Rand
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(s.data), 1+s.rng.IntN(64))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

func streamed(seed uint64, data []byte) io.Reader {
	return &splitReader{data: data, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// fuzzWire runs read on data whole and split, compares the outcomes, and
// checks encode(v) against the bytes the reader took.
func fuzzWire[T any](f *testing.F, seeds [][]byte, read func(io.Reader) (T, error), encode func(T) []byte) {
	for i, s := range seeds {
		f.Add(uint64(i), s)
	}
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		whole := bytes.NewReader(data)
		v1, err1 := read(whole)
		v2, err2 := read(streamed(seed, data))
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("whole: %v, split: %v", err1, err2)
		}
		if err1 != nil {
			return
		}
		if !reflect.DeepEqual(v1, v2) {
			t.Fatalf("whole read %+v, split read %+v", v1, v2)
		}
		if encode != nil {
			taken := data[:len(data)-whole.Len()]
			if got := encode(v1); !bytes.Equal(got, taken) {
				t.Fatalf("read %x, encodes back to %x", taken, got)
			}
		}
	})
}

func FuzzReadHello(f *testing.F) {
	fuzzWire(f, [][]byte{Hello{Op: OpFetch, Token: []byte("tok")}.Encode(), Hello{Op: OpRail}.Encode(), []byte("WSP1\x09")},
		ReadHello, func(h Hello) []byte { return h.Encode() })
}

func FuzzReadRequest(f *testing.F) {
	fuzzWire(f, [][]byte{Enc{}.Blob32([]byte("sha256:00")), Enc{}.U32(0xffffffff), Enc{}.U32(ModelRequestMax + 1)},
		ReadRequest, func(s string) []byte { return Enc{}.Blob32([]byte(s)) })
}

func FuzzReadStatus(f *testing.F) {
	fuzzWire(f, [][]byte{StatusFrame(StatusOK, ""), StatusFrame(StatusNotFound, "no"), Enc{StatusBusy}.U32(0xffffffff), {200}},
		func(r io.Reader) (string, error) {
			err := ReadStatus(r, "status")
			if re, ok := err.(*RemoteError); ok {
				return string(rune(re.Code)) + re.Message, nil
			}
			return "", err
		}, nil)
}

func FuzzReadRailAttach(f *testing.F) {
	fuzzWire(f, [][]byte{RailAttach{Rail: 3}.Encode(), make([]byte, 32)},
		ReadRailAttach, func(a RailAttach) []byte { return a.Encode() })
}

func FuzzReadRangeRequest(f *testing.F) {
	fuzzWire(f, [][]byte{RangeRequest{Shard: 1, Off: 2, N: 3}.Encode(), RangeRequest{Shard: 1, Off: 2, N: 3, Pieces: true}.Encode(), make([]byte, 19)},
		ReadRangeRequest, func(q RangeRequest) []byte { return q.Encode() })
}

// FuzzReadPieceCVs: the range's length and piece size come first in the
// data, so the bound varies too.
func FuzzReadPieceCVs(f *testing.F) {
	cvs := [][32]byte{{1}, {2}, {3}}
	fuzzWire(f, [][]byte{Enc{}.U64(3 << 20).U64(1 << 20).Raw(EncodePieceCVs(cvs)), Enc{}.U64(1 << 20).U64(1 << 20).Raw(EncodePieceCVs(cvs)),
		Enc{}.U64(1 << 40).U64(1024).Raw(Enc{StatusOK}.U32(0xffffffff)), Enc{}.U64(5).U64(0).Raw(EncodePieceCVs(nil)),
		Enc{}.U64(5).U64(1).Raw(StatusFrame(StatusUnsupported, "no"))},
		func(r io.Reader) ([][32]byte, error) {
			var b [16]byte
			if err := ReadFull(r, b[:], "bounds"); err != nil {
				return nil, err
			}
			return ReadPieceCVs(r, le64(b[:8]), le64(b[8:]))
		}, nil)
}

func FuzzReadUnitKeyRequest(f *testing.F) {
	fuzzWire(f, [][]byte{UnitKeyRequest{Rail: 1, RangeRequest: RangeRequest{Shard: 2, Off: 3, N: 4}}.Encode(), make([]byte, 20)},
		ReadUnitKeyRequest, func(q UnitKeyRequest) []byte { return q.Encode() })
}

func FuzzReadUnitKey(f *testing.F) {
	fuzzWire(f, [][]byte{RemoteKey{Base: 1, Key: 2}.Encode(), StatusFrame(StatusBusy, "ended"), Enc{StatusOK}.U64(1)},
		ReadUnitKey, func(k RemoteKey) []byte { return k.Encode() })
}

func FuzzReadTransportAnswer(f *testing.F) {
	ok := Enc{StatusOK}.U8(2).Raw(make([]byte, 16)).Blob16(EncodeTCPEndpoint("10.0.0.1", 7420)).Blob16(EncodeRMAEndpoint("sockets", "::1", 1))
	fuzzWire(f, [][]byte{ok, Enc{StatusOK}.U8(0), Enc{StatusOK}.U8(1).Raw(make([]byte, 16)).U16(0xffff)},
		func(r io.Reader) ([][]byte, error) {
			a, err := ReadTransportAnswer(bufio.NewReader(r), 4)
			return a.Endpoints, err
		}, nil)
}

func FuzzDecodeEndpoints(f *testing.F) {
	for i, s := range [][]byte{EncodeTCPEndpoint("10.233.0.1", 7420), EncodeRMAEndpoint("verbs", "fe80::1", 9), {255}} {
		f.Add(uint64(i), s)
	}
	f.Fuzz(func(t *testing.T, _ uint64, data []byte) {
		if e, err := DecodeTCPEndpoint(data); err == nil && !bytes.Equal(EncodeTCPEndpoint(e.Host, e.Port), data) {
			t.Fatalf("tcp endpoint %x does not encode back", data)
		}
		if e, err := DecodeRMAEndpoint(data); err == nil && !bytes.Equal(EncodeRMAEndpoint(e.Provider, e.Host, e.Port), data) {
			t.Fatalf("rma endpoint %x does not encode back", data)
		}
	})
}

func FuzzReadKeyTable(f *testing.F) {
	keys := [][]RemoteKey{{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}
	fuzzWire(f, [][]byte{EncodeKeyTable(keys), Enc{}.U32(0xffffffff), Enc{}.U32(4)},
		func(r io.Reader) ([][]RemoteKey, error) { return ReadKeyTable(r, 2, 2) },
		func(k [][]RemoteKey) []byte { return EncodeKeyTable(k) })
}

// fuzzManifest is a valid manifest document for the seeds.
func fuzzManifest(tb testing.TB) []byte {
	id := fuzzIdentity()
	d, _ := id.ID()
	header := []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
	m := WeightManifest{Schema: ManifestSchema, Generation: "00112233445566778899aabbccddeeff", Identity: id, ID: d,
		Shards: []WeightShard{{FileEntry: artifact.FileEntry{File: artifact.File{Path: "a.safetensors", Size: 24, SHA256: hexOf(1), BLAKE3: hexOf(2)}, DataStart: 16, HeaderBLAKE3: artifact.BLAKE3Hex(header),
			Tensors: []artifact.TensorEntry{{Name: "w", DType: "BF16", Shape: []int64{4}, Offset: 16, Length: 8, BLAKE3: hexOf(4)}}}, Header: header},
			{FileEntry: artifact.FileEntry{File: artifact.File{Path: "config.json", Size: 2, SHA256: hexOf(5), BLAKE3: hexOf(6)}}}}}
	tree, err := artifact.EntryTree(m.Shards[0].FileEntry)
	if err != nil {
		tb.Fatal(err)
	}
	m.Shards[0].BLAKE3 = tree
	if err := m.validate(); err != nil {
		tb.Fatal(err)
	}
	raw, err := json.Marshal(&m)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

func FuzzReadManifest(f *testing.F) {
	doc := fuzzManifest(f)
	building := bytes.Replace(doc, []byte(`"shards"`), []byte(`"building":true,"depth":3,"shards"`), 1)
	pieces := bytes.Replace(doc, []byte(`"shards"`), []byte(`"piece_size":1048576,"shards"`), 1)
	signed := bytes.Replace(doc, []byte(`"shards"`), []byte(`"signatures":"eyJzY2hlbWEiOjEsInJlY29yZHMiOltdfQ==","shards"`), 1)
	emptySigs := bytes.Replace(doc, []byte(`"shards"`), []byte(`"signatures":"","shards"`), 1)
	fuzzWire(f, [][]byte{Enc{}.Blob32(doc), Enc{}.U32(0xffffffff), Enc{}.Blob32(doc[:len(doc)/2]), Enc{}.Blob32(building), Enc{}.Blob32(pieces),
		Enc{}.Blob32(signed), Enc{}.Blob32(emptySigs)},
		func(r io.Reader) (*WeightManifest, error) {
			m, err := ReadManifest(r, 1<<20)
			if err == nil { // what was accepted is accepted again, unchanged
				raw, _ := json.Marshal(m)
				again, err := decodeManifest(raw)
				if err != nil || !reflect.DeepEqual(again, m) {
					panic("an accepted manifest does not survive its own encoding")
				}
			}
			return m, err
		}, nil)
}

func FuzzReadListing(f *testing.F) {
	ls, _ := json.Marshal(Listing{Generation: "00", Modes: []Mode{ModeTCP}, Artifacts: []ListedArtifact{{ID: artifact.MustParseID("sha256:" + hexOf(0))}}})
	fuzzWire(f, [][]byte{Enc{StatusOK}.Blob32(ls), Enc{StatusOK}.U32(0xffffffff)},
		func(r io.Reader) (*Listing, error) { return ReadListing(r, 1<<20) }, nil)
}

func fuzzIdentity() artifact.Identity {
	src := &artifact.SourceDir{Files: []artifact.SourceFile{{Path: "a.safetensors", Size: 24, SHA256: hexOf(1)}}}
	return storetest.Identity(src)
}

// hexOf is a 64-hex digest made of one repeated byte.
func hexOf(b byte) string { return hex.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
