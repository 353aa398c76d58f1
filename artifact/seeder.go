package artifact

// Seeder is the part of a Writer that publishes a build's progress to
// other processes, so a node can serve an artifact while it
// builds it (chain seeding). What it records never changes what READY
// means: a reader of a building artifact reads only ranges recorded
// verified.
type Seeder interface {
	// Seeding says whether a process serves this store's builds now: a
	// producer that would do extra work to announce may skip it when none does.
	Seeding() bool
	// Announce records the document a serving side needs before any
	// payload (the weight peer's manifest of the artifact). Once only,
	// before the first Verified.
	Announce(doc []byte) error
	// Verified records that [off, off+n) of the payload file at path holds
	// bytes this node verified against the artifact's digests. It must be
	// called only after those bytes are written to the file.
	Verified(path string, off, n int64) error
	// Pieces records the chaining values of the pieces of [off, off+n) of
	// the payload file at path (artifact/blake3's pieces), checked against
	// the range's BLAKE3, before any of those pieces is Verified: a serving
	// side then hands them out before the range is whole.
	Pieces(path string, off, n int64, cvs [][32]byte) error
	// Source records where the build takes its bytes from now, as its
	// depth: how many building nodes stand between it and a complete
	// source (0: the registry or a node holding the artifact READY; a
	// builder's depth plus one when it fetches from that builder). After
	// the announce, and again whenever the source changes. Peers choose
	// builders by it so that no two builders wait on each other.
	Source(depth int) error
}

// MaxDepth bounds a build's depth (Seeder.Source), wherever it is read.
const MaxDepth = 1 << 16

// Announcement is the document a seeding producer announces, as JSON: the
// artifact's identity and every payload file's entry, with each safetensors
// file's header region (Headers[i] for Files[i], nil for a file without
// one), verified against its HeaderBLAKE3 before the announce. Both a peer
// fetch (from the parent's manifest) and a registry pull (from the index
// layer) can write it; the weight peer serves it as its WeightManifest.
type Announcement struct {
	Identity Identity    `json:"identity"`
	Files    []FileEntry `json:"files"`
	Headers  [][]byte    `json:"headers"`
}
