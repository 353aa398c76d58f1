//go:build !libfabric

package fabric

// Built says whether this build has the libfabric binding.
const Built = false
