// Package fabric is the libfabric binding of the peer's rma data plane:
// connected FI_EP_MSG endpoints, memory registrations and batched one-sided
// reads, through cgo, built only with the build tag libfabric; without the
// tag it holds Built (false) and Missing, and the peer reports rma
// unsupported.
package fabric

// Missing says why a build has no rma data plane.
const Missing = "this build has no libfabric (build with -tags libfabric)"
