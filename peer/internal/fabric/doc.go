// Package fabric is the libfabric binding of the peer's rma data plane:
// connected FI_EP_MSG endpoints, memory registrations and batched one-sided
// reads, through cgo, built only with the build tag libfabric (without it
// Built is false and the package holds nothing else).
package fabric

// Missing says why a build has no rma data plane.
const Missing = "this build has no libfabric (build with -tags libfabric)"
