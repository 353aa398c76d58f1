// Package wire is the weight peer's wire protocol: framing, the
// little-endian length-prefixed messages with every bounded length check,
// and the WeightManifest and listing documents a peer sends.
//
// The control plane is one TCP connection (optionally TLS, with client
// certificates), little-endian:
//
//	client: hello      "WSP1" op:u8 [u16 len][bearer token]
//	client: request    [u32 len][identity digest | manifest digest | staged:NAME[/SUBDIR]]   (fetch)
//	server: status     u8, then [u32 len][message] on an error
//	server: manifest   [u32 len][WeightManifest JSON]                 (or the list, for op list)
//	client: transport  mode:u8 n_rails:u8                             (n_rails taken as at least 1)
//	server: status, rails:u8 session:[16] then per rail [u16 len][endpoint parameters]
//	        rma only: after the client connected every rail, status and per rail per shard (base u64, key u64)
//	client: ping (0x01) every few seconds while the data plane runs; done (0x00)
//	server: status (the acknowledgement), then a clean close
//
// A tcp rail opens with its own hello (op rail, no token), then the
// session's secret, the server's generation id and the rail number; each
// range request is [u32 shard][u64 offset][u64 length], answered by a
// status and the bytes; with bit 31 of shard set (to a peer whose manifest
// has a piece_size), by a status and the range's pieces' chaining values,
// [u32 count][count × 32].
//
// Every length and count read from the wire is bounded and compared as
// unsigned before it is converted or allocated; every read has a deadline
// (DeadlineConn).
package wire
