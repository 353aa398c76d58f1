// Package peer is the weight peer's sessions, server, client and source
// selection: a node serves the store's READY artifacts (and explicitly
// exported directories) to other nodes, and a node fetches an artifact, or
// the tensors of one that match patterns, from whichever configured peer
// holds it, writing through the store's writer.
//
// The server half is server.go, session.go, servable.go, exports.go, the
// serve_*.go files and rma_server.go; the client half is client.go,
// select.go, choose.go, provider.go, subset.go and the fetch*.go files.
//
// The wire protocol (framing, bounds, the WeightManifest) is
// peer/internal/wire; the libfabric binding of the rma plane is
// peer/internal/fabric. Tensor i goes on rail i % n_rails; on the rma plane
// its remote address is the shard's base plus the tensor's offset in the
// shard.
//
// Data planes: "tcp" (pure Go, the default): one connection per rail, each
// attached to the session by its secret and the server's generation id,
// serving ranged reads with sendfile, and a unit longer than a piece in
// pieces where the fetch seeds or its source builds (fetch_pieces.go, serve_pieces.go); "rma" (build tag libfabric): one
// FI_EP_MSG endpoint per rail, every shard's mapping registered read-only for
// remote reads (a building artifact's unit by unit, once verified, as the
// client asks for each unit's key), the client posting batched one-sided
// reads into its mapped destination files. Without the tag the rma mode is reported unsupported.
//
// Every session carries the server's generation id (random per process), so
// a client that reconnects to a restarted peer notices, and never presents
// rail secrets or keys of the old process.
package peer
