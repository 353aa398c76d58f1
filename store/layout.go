package store

// The names the store gives what it writes under a domain's root. Every
// string constant of the package named dir*, file* or lock* is such a
// name, and test/arch holds that each appears in the layout block of
// docs/architecture.md.
const (
	fileDomain       = "domain.json"        // the domain's schema, filesystem and scope
	fileDomainPolicy = "domain-policy.json" // the domain's policy

	dirArtifacts  = "artifacts"  // READY artifacts, one directory each
	dirLocks      = "locks"      // the lock files
	dirTmp        = "tmp"        // builds and removals' tombstones
	dirQuarantine = "quarantine" // invalid or replaced entries
	dirDeny       = "deny"       // deny markers

	lockDomain = "domain.lock" // held while a process opens the domain
	lockServe  = "serve.lock"  // held while a weight peer serves the domain
)
