// Package staging makes the model data a node needs local, verified and
// cheap to re-stage, from a declarative recipe (recipe.toml, [[staging]]
// blocks). Each block is a lane:
//
//   - hub-mirror: a Hugging Face hub cache (models--org--name/{blobs,
//     snapshots,refs}) mirrored to a local hub cache. Blobs are copied with
//     big parallel reads and verified against their own names (sha256 or git
//     blob sha1) in full mode, by size and sampled ranges in sample-hash
//     mode; snapshot links stay relative links; identical blobs across repos
//     and lanes are hardlinked after a full byte compare, never by size.
//   - sparse-rows: a rank's contiguous row range of named safetensors
//     tables, written at its original offsets into a sparse file that still
//     parses as the original.
//
// A ledger per (lane, node) records what was staged, from where, its content
// hashes and the verify mode, and the lane's last use. Mode auto skips what
// the ledger and a content check (destination stat, source size and sampled
// content; never a source mtime) say is complete; force re-verifies
// everything; skip trusts the ledger. Verified files are journaled as they
// land, so a crashed run resumes without copying them again.
//
// Before any byte is written, a preflight checks every lane: the source is
// reachable, the destination keeps min_free after staging, the page cache
// has room for keep_in_memory, and the destination filesystem stays under
// its watermark (max_used), evicting least-recently-used lanes that nothing
// uses. A dry run prints that plan and touches no data.
//
// State (ledgers, journals, locks) lives in a state directory, by default
// <store root>/staging; staged data lives where each lane's dst says.
package staging
