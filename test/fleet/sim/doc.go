// Package sim is a discrete-event model of a fleet rollout with the peer protocol (no network, no
// processes): every node starts at once, the rendezvous root takes the registry, the others ask
// the peers again on the protocol's jittered backoff until a holder or a builder with a free child
// slot (max_children) serves them, or RootWait passes (twice, when the last answer was busy) and
// they take the registry themselves. Bytes move a piece (blake3.PieceSize) at a time over links of
// one rate, each uplink shared in turn by its children; the root passes a tensor on once it
// verified it whole, every other node a piece once it verified it, a hop's delay later. A node
// that dies drops its sessions: its child scans its peers for a holder or a builder nearer the
// origin with a free slot, and at depth 0 or 1 leaves for the registry after orphanSettle and
// orphanStep per rank, resuming what it verified. Tensor sizes come from artifact/synth's layout.
//
// Run is deterministic for a seed. TestCalibration sets the model's timings from a measured
// benchmark (testdata/measured.json, scripts/bench-fleet.sh) and checks its p50 and p99 within
// 10% at every N; cmd/fleetsim predicts other settings (Kraken's: 3 GB, 2,600 nodes, 300 MB/s).
package sim
