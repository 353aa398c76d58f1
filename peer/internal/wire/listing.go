package wire

import (
	"bytes"
	"io"

	"github.com/weightsnap/weightsnap/artifact"
)

// Listing is what a peer holds, as `list` answers it.
type Listing struct {
	Generation  string `json:"generation"`
	Sessions    int    `json:"sessions"`
	MaxSessions int    `json:"max_sessions"`
	Modes       []Mode `json:"modes"`
	// MaxChildren is how many sessions this peer serves of one artifact at once.
	MaxChildren int              `json:"max_children,omitempty"`
	Artifacts   []ListedArtifact `json:"artifacts"`
	// Exports are the exported directories (the JSON key "staged" names
	// exported directories).
	Exports []ListedExport `json:"staged"`
	// Wants are the artifacts a resolve of this peer's node looks for a
	// source of now, or chose one for a moment ago (store.Domain.Want).
	Wants []artifact.ID `json:"wants,omitempty"`
}

// ListedArtifact is one artifact of the peer's store: READY, or being
// built and served as it verifies (Building, with VerifiedBytes so far).
type ListedArtifact struct {
	ID             artifact.ID `json:"identity_digest"`
	ManifestDigest string      `json:"manifest_digest"`
	Repository     string      `json:"repository,omitempty"`
	Revision       string      `json:"revision"`
	Component      string      `json:"component"`
	Producer       string      `json:"producer"`
	Bytes          int64       `json:"bytes"`
	Files          int         `json:"files"`
	Tensors        int         `json:"tensors"`
	Building       bool        `json:"building,omitempty"`
	VerifiedBytes  int64       `json:"verified_bytes,omitempty"`
	// Depth is a building artifact's (WeightManifest.Depth).
	Depth int `json:"depth,omitempty"`
	// Children are the sessions serving it now.
	Children int `json:"children,omitempty"`
	// Stripes are the stripes of it served now, one striped session or
	// more each (the striped forest's).
	Stripes []ListedStripe `json:"stripes,omitempty"`
}

// ListedStripe is one stripe of an artifact a peer serves now, and how
// many sessions serve it.
type ListedStripe struct {
	Index    int `json:"index"`
	Count    int `json:"count"`
	Sessions int `json:"sessions"`
}

// ListedExport is one exported directory.
type ListedExport struct {
	Name     string `json:"name"`
	Revision string `json:"revision,omitempty"`
	// Mapped says whether it is hashed and mapped now (the JSON key
	// "staged" is the listing's word for it), and Bytes how much it holds
	// mapped.
	Mapped bool  `json:"staged"`
	Bytes  int64 `json:"bytes,omitempty"`
}

// ReadListing reads the answer to list: a status, then [u32 len][JSON].
func ReadListing(r io.Reader, limit uint32) (*Listing, error) {
	if err := ReadStatus(r, "list"); err != nil {
		return nil, err
	}
	doc, err := ReadBlob32(r, limit, "list")
	if err != nil {
		return nil, err
	}
	var ls Listing
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &ls); err != nil {
		return nil, Errorf("list", "%v", err)
	}
	return &ls, nil
}
