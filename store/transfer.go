package store

import "github.com/weightsnap/weightsnap/artifact"

// Transfer is what moving an artifact from a remote into the store did:
// the one transfer report, with one JSON shape, that a pull's report, a
// peer fetch's and a resolution step's all carry. A producer that moves
// bytes says it through TransferReporter; Materialise adds the timings.
type Transfer struct {
	// Endpoint is where the bytes came from: the peer finished with, or
	// the registry reference.
	Endpoint string `json:"endpoint,omitempty"`
	// Mode is the data plane (tcp, rma); "" for a registry.
	Mode string `json:"mode,omitempty"`
	// Rails is how many rails the data plane had; 0 for a registry.
	Rails int `json:"rails,omitempty"`
	// Fetched is the payload bytes moved and verified.
	Fetched int64 `json:"fetched_bytes"`
	// Reused is the payload bytes adopted from an interrupted build of the
	// same artifact: ReusedFiles files it completed, and the verified
	// prefixes of ResumedFiles files it wrote in part, continued from there.
	Reused       int64 `json:"reused_bytes"`
	ReusedFiles  int   `json:"reused_files"`
	ResumedFiles int   `json:"resumed_files"`
	// Ranged says large files came as parallel ranges.
	Ranged bool `json:"ranged"`
	// FetchSeconds is the producer's time (transfers and hashing);
	// PublishSeconds the store's publication after it (fsync waits included).
	FetchSeconds   float64 `json:"fetch_seconds"`
	PublishSeconds float64 `json:"publish_seconds"`
}

// TransferReporter is a producer that says how it moved an artifact, once
// it ran: its endpoint, data plane and bytes, not the timings.
type TransferReporter interface {
	Transfer() Transfer
}

// TransferReport is what a pull or a peer fetch into the store reports of the artifact.
// It says which one, where it is, whether this call built it, its size,
// and the Transfer that moved it.
type TransferReport struct {
	ID    artifact.ID `json:"identity"`
	Path  string      `json:"path"`
	Built bool        `json:"built"`
	Files int         `json:"files"`
	Bytes int64       `json:"bytes"`
	Transfer
}

// Report is the transfer report of a Materialise that gave lease l.
func (m Materialised) Report(l *Lease) TransferReport {
	r := TransferReport{ID: l.ID, Path: l.Dir, Built: m.Built, Files: len(l.Index.Files), Bytes: l.Index.TotalBytes()}
	if m.Transfer != nil {
		r.Transfer = *m.Transfer
	}
	return r
}
