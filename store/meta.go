package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/weightsnap/weightsnap/artifact"
)

// Schema versions of the artifact metadata files.
const (
	ManifestSchema = 1
	ReadySchema    = 1
)

// Metadata file names inside an artifact directory. READY.json is written last.
const (
	fileReady    = "READY.json"
	fileManifest = "manifest.json"
	fileIndex    = "index.json"
)

// Manifest is manifest.json: the identity and the payload files.
type Manifest struct {
	Schema     int               `json:"schema"`
	Identity   artifact.Identity `json:"identity"`
	ID         artifact.ID       `json:"identity_digest"`
	Files      []artifact.File   `json:"files"` // the index's entries without their tensors
	TotalBytes int64             `json:"total_bytes"`
}

// Ready is READY.json: it seals the manifest and index by their digests.
type Ready struct {
	Schema         int         `json:"schema"`
	ID             artifact.ID `json:"identity_digest"`
	ManifestSHA256 string      `json:"manifest_sha256"`
	IndexSHA256    string      `json:"index_sha256"`
	Producer       string      `json:"producer"`
	Created        string      `json:"created"`
}

// DecodeManifest parses manifest.json strictly and checks it against its identity.
func DecodeManifest(doc []byte) (*Manifest, error) {
	var m Manifest
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Schema != ManifestSchema {
		return nil, fmt.Errorf("manifest: unsupported schema %d", m.Schema)
	}
	if err := m.Identity.Validate(); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	dg, err := m.Identity.ID()
	if err != nil || dg != m.ID {
		return nil, fmt.Errorf("manifest: identity digest %q does not match the identity", m.ID.String())
	}
	var total int64
	for i, f := range m.Files {
		if err := artifact.ValidateRelPath(f.Path); err != nil {
			return nil, fmt.Errorf("manifest: file %d: %w", i, err)
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			return nil, fmt.Errorf("manifest: files not sorted at %q", f.Path)
		}
		if f.Size < 0 || total+f.Size < total {
			return nil, fmt.Errorf("manifest: file %q: bad size", f.Path)
		}
		total += f.Size
	}
	if total != m.TotalBytes {
		return nil, fmt.Errorf("manifest: total_bytes %d is not the sum of the files (%d)", m.TotalBytes, total)
	}
	return &m, nil
}

// DecodeReady parses READY.json strictly.
func DecodeReady(doc []byte) (*Ready, error) {
	var r Ready
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &r); err != nil {
		return nil, fmt.Errorf("READY.json: %w", err)
	}
	if r.Schema != ReadySchema {
		return nil, fmt.Errorf("READY.json: unsupported schema %d", r.Schema)
	}
	return &r, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
