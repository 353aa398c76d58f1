// Package peer is the weight peer: a node serves the store's READY artifacts
// (and explicitly allowlisted staged directories) to other nodes, and a node
// fetches an artifact, or the tensors of one that match patterns, from
// whichever configured peer holds it, writing through the store's writer.
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
// Every length and count read from the wire is bounded and compared as
// unsigned before it is converted or allocated; every read has a deadline.
// Tensor i goes on rail i % n_rails; on the rma plane its remote address is
// the shard's base plus the tensor's offset in the shard.
//
// Data planes: "tcp" (pure Go, the default): one connection per rail, each
// attached to the session by its secret and the server's generation id,
// serving ranged reads with sendfile; "rma" (build tag libfabric): one
// FI_EP_MSG endpoint per rail, every shard's mapping registered read-only for
// remote reads, the client posting batched one-sided reads into its mapped
// destination files. Without the tag the rma mode is reported unsupported.
//
// Every session carries the server's generation id (random per process), so
// a client that reconnects to a restarted peer notices, and never presents
// rail secrets or keys of the old process.
package peer
