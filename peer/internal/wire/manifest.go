package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
)

// ManifestSchema is the version of the WeightManifest encoding: 2 carries
// every safetensors shard's header bytes.
const ManifestSchema = 2

// WeightManifest is what a peer answers a model request with: the session's
// generation id, the artifact's identity and every shard it will serve.
type WeightManifest struct {
	Schema int `json:"schema"`
	// Generation is the serving process's generation id (32 hex), new at
	// every start of the peer.
	Generation string            `json:"generation"`
	Identity   artifact.Identity `json:"identity"`
	ID         artifact.ID       `json:"identity_digest"`
	// ManifestDigest is sha256 of the store's manifest.json (store artifacts).
	ManifestDigest digest.Digest `json:"manifest_digest,omitempty"`
	// Export is the staged id of an exported directory (the JSON key
	// "staged" names exported directories).
	Export string        `json:"staged,omitempty"`
	Shards []WeightShard `json:"shards"`
	// Building says the peer serves the artifact while it builds it (chain
	// seeding), and Depth how many building nodes stand between that build
	// and a complete source (artifact.Seeder.Source), -1 while it has none.
	Building bool `json:"building,omitempty"`
	Depth    int  `json:"depth,omitempty"`
	// PieceSize says the peer answers a tcp range request for pieces
	// (RangeRequest.Pieces) with pieces of that many bytes; 0 where it
	// does not.
	PieceSize int64 `json:"piece_size,omitempty"`
	// Records are the store's records of how the artifact was verified
	// against the sender's trust policy (package trust's encoding: the
	// signed OCI manifest, its reference, the bundles), absent when it
	// keeps none. The receiver checks them, offline, against its own
	// policy and against the shards before it publishes anything.
	Records []byte `json:"signatures,omitempty"`
}

// WeightShard is one payload file: its index entry and, for a safetensors
// shard, the bytes of its header region (which a tensor subset takes
// __metadata__ from). Its wire encoding is shardJSON's.
type WeightShard struct {
	artifact.FileEntry
	Header []byte
}

// shardJSON is a WeightShard on the wire (docs/formats.md): the entry's
// path is "name", and the header bytes follow data_start.
type shardJSON struct {
	Name         string                 `json:"name"`
	Size         int64                  `json:"size"`
	SHA256       string                 `json:"sha256"`
	BLAKE3       string                 `json:"blake3"`
	DataStart    int64                  `json:"data_start,omitempty"`
	Header       []byte                 `json:"header,omitempty"`
	HeaderBLAKE3 string                 `json:"header_blake3,omitempty"`
	Tensors      []artifact.TensorEntry `json:"tensors,omitempty"`
}

// MarshalJSON encodes the shard in its wire form.
func (s WeightShard) MarshalJSON() ([]byte, error) {
	return json.Marshal(shardJSON{Name: s.Path, Size: s.Size, SHA256: s.SHA256, BLAKE3: s.BLAKE3,
		DataStart: s.DataStart, Header: s.Header, HeaderBLAKE3: s.HeaderBLAKE3, Tensors: s.Tensors})
}

// UnmarshalJSON decodes the shard's wire form as strictly as the manifest
// around it: a field the wire does not name is refused.
func (s *WeightShard) UnmarshalJSON(doc []byte) error {
	var j shardJSON
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &j); err != nil {
		return err
	}
	*s = WeightShard{FileEntry: artifact.FileEntry{File: artifact.File{Path: j.Name, Size: j.Size, SHA256: j.SHA256, BLAKE3: j.BLAKE3},
		DataStart: j.DataStart, HeaderBLAKE3: j.HeaderBLAKE3, Tensors: j.Tensors}, Header: j.Header}
	return nil
}

// ShardFromEntry is a store index entry, of a file holding data, as a
// manifest shard.
func ShardFromEntry(e artifact.FileEntry, data []byte) WeightShard {
	s := WeightShard{FileEntry: e}
	if e.DataStart > 0 {
		s.Header = bytes.Clone(data[:e.DataStart])
	}
	return s
}

// TotalBytes is the sum of the shard sizes.
func (m *WeightManifest) TotalBytes() int64 {
	var n int64
	for _, s := range m.Shards {
		n += s.Size
	}
	return n
}

// CheckPassthrough checks that the shards of a passthrough identity are
// its source fingerprint: a disagreement is an identity collision.
func (m *WeightManifest) CheckPassthrough() error {
	entries := make([]artifact.FileEntry, len(m.Shards))
	for i, s := range m.Shards {
		entries[i] = s.FileEntry
	}
	return m.Identity.CheckPassthrough(entries)
}

// emptyBLAKE3 is the BLAKE3 of no bytes.
var emptyBLAKE3 = artifact.BLAKE3Hex(nil)

// decodeManifest parses and validates a manifest strictly: unknown fields,
// trailing data, paths that leave the artifact, bad digests and shards whose
// header and tensors do not tile the file are refused.
func decodeManifest(doc []byte) (*WeightManifest, error) {
	var m WeightManifest
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &m); err != nil {
		return nil, Errorf("manifest", "%v", err)
	}
	if err := m.validate(); err != nil {
		return nil, Errorf("manifest", "%v", err)
	}
	return &m, nil
}

func (m *WeightManifest) validate() error {
	if m.Schema != ManifestSchema {
		return fmt.Errorf("unsupported schema %d", m.Schema)
	}
	if !hex32RE.MatchString(m.Generation) {
		return fmt.Errorf("generation %q is not 32 hex digits", m.Generation)
	}
	if err := m.Identity.Validate(); err != nil {
		return err
	}
	if d, err := m.Identity.ID(); err != nil || d != m.ID {
		return fmt.Errorf("identity digest %q does not match the identity", m.ID.String())
	}
	if m.ManifestDigest != "" && (m.ManifestDigest.Validate() != nil || m.ManifestDigest.Algorithm() != digest.SHA256) {
		return fmt.Errorf("manifest digest %q is not a sha256 digest", m.ManifestDigest)
	}
	if len(m.Shards) == 0 {
		return fmt.Errorf("no shards")
	}
	if uint64(len(m.Records)) > artifact.MaxRecordsBytes || (m.Records != nil && len(m.Records) == 0) {
		return fmt.Errorf("signature records of %d bytes (1 to %d)", len(m.Records), artifact.MaxRecordsBytes)
	}
	if m.Depth < -1 || m.Depth > artifact.MaxDepth || (!m.Building && m.Depth != 0) {
		return fmt.Errorf("depth %d (building %t) out of bounds", m.Depth, m.Building)
	}
	if m.PieceSize != 0 && (m.PieceSize < 1024 || m.PieceSize > MaxPieceSize || m.PieceSize&(m.PieceSize-1) != 0) {
		return fmt.Errorf("piece size %d: not a power of two from 1 KiB to %d", m.PieceSize, MaxPieceSize)
	}
	var total int64
	for i, s := range m.Shards {
		if err := artifact.ValidateRelPath(s.Path); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		if i > 0 && m.Shards[i-1].Path >= s.Path {
			return fmt.Errorf("shards not sorted at %q", s.Path)
		}
		if s.Size < 0 || s.Size > math.MaxInt64-total {
			return fmt.Errorf("shard %q: bad size %d", s.Path, s.Size)
		}
		total += s.Size
		if !artifact.IsSHA256Hex(s.SHA256) || !artifact.IsSHA256Hex(s.BLAKE3) {
			return fmt.Errorf("shard %q: digests are not 64 hex digits", s.Path)
		}
		if err := s.validateLayout(); err != nil {
			return fmt.Errorf("shard %q: %w", s.Path, err)
		}
	}
	return nil
}

// validateLayout checks that a safetensors shard's header region and
// tensors tile the file exactly, and that any other file has neither.
func (s WeightShard) validateLayout() error {
	if !artifact.IsSafetensors(s.Path) {
		if s.DataStart != 0 || s.HeaderBLAKE3 != "" || s.Header != nil || len(s.Tensors) != 0 {
			return fmt.Errorf("tensors in a file that is not safetensors")
		}
		if s.Size == 0 && s.BLAKE3 != emptyBLAKE3 {
			return fmt.Errorf("an empty file with the BLAKE3 of bytes")
		}
		return nil
	}
	if s.DataStart < 8 || s.DataStart > s.Size || !artifact.IsSHA256Hex(s.HeaderBLAKE3) {
		return fmt.Errorf("bad header region")
	}
	if int64(len(s.Header)) != s.DataStart || artifact.BLAKE3Hex(s.Header) != s.HeaderBLAKE3 {
		return fmt.Errorf("the header bytes are not the header region its BLAKE3 names")
	}
	end := s.DataStart
	names := make(map[string]struct{}, len(s.Tensors))
	for _, t := range s.Tensors {
		if _, dup := names[t.Name]; dup || t.Name == "" {
			return fmt.Errorf("tensor name %q empty or repeated", t.Name)
		}
		names[t.Name] = struct{}{}
		if _, ok := artifact.LookupDType(t.DType); !ok {
			return fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if t.Offset != end || t.Length < 0 || t.Length > s.Size-t.Offset {
			return fmt.Errorf("tensor %q: [%d,+%d) does not follow the previous end %d inside the file", t.Name, t.Offset, t.Length, end)
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("tensor %q: negative shape", t.Name)
			}
		}
		if !artifact.IsSHA256Hex(t.BLAKE3) || (t.Length == 0 && t.BLAKE3 != emptyBLAKE3) {
			return fmt.Errorf("tensor %q: BLAKE3 is not 64 hex digits, or not the empty one of an empty tensor", t.Name)
		}
		end = t.Offset + t.Length
	}
	if end != s.Size {
		return fmt.Errorf("tensors end at %d, the file at %d", end, s.Size)
	}
	if tree, err := artifact.EntryTree(s.FileEntry); err != nil || tree != s.BLAKE3 {
		return fmt.Errorf("blake3 is not the tensor tree of the header and tensors")
	}
	return nil
}

// ReadManifest reads [u32 len][WeightManifest JSON], refusing a length over
// limit before allocating.
func ReadManifest(r io.Reader, limit uint32) (*WeightManifest, error) {
	doc, err := ReadBlob32(r, limit, "manifest")
	if err != nil {
		return nil, err
	}
	return decodeManifest(doc)
}
