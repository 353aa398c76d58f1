package sim

import "time"

// The protocol's constants, as peer/ has them (TestConstantsMatchPeer reads peer/'s source and
// fails on any drift): the model waits, backs off and gives up exactly as a node does.
const (
	// DefaultMaxChildren is peer.DefaultMaxChildren: sessions one node serves of an artifact.
	DefaultMaxChildren = 1
	// RootWait is peer.DefaultRootWait: how long a node that is not the root asks the peers again
	// (one round; a round that ends busy is followed by one more) before it takes the registry.
	RootWait = 5 * time.Second
	// ReaskFirst and ReaskMax bound the jittered backoff (factor 1.5, randomisation 0.5) between
	// those asks (peer's reaskFirst, reaskMax).
	ReaskFirst = 100 * time.Millisecond
	ReaskMax   = 800 * time.Millisecond
	// ListTimeout is peer's listTimeout: a listing round ends at it, whoever did not answer.
	ListTimeout = 2 * time.Second
	// OrphanSettle and OrphanStep are peer's orphanSettle and orphanStep: an orphan at depth 0 or
	// 1 leaves for the registry after OrphanSettle plus OrphanStep per rank.
	OrphanSettle = 300 * time.Millisecond
	OrphanStep   = time.Second
	// RetryFirst and RetryMax bound the backoff (doubling, no jitter) between a fetch's failed
	// sessions (peer's retryFirst, retryMax).
	RetryFirst = 100 * time.Millisecond
	RetryMax   = 1600 * time.Millisecond
	// SessionTimeout is peer.DefaultTimeout: a session's read waits this long for a byte, so a
	// source whose host went silent (no reset) fails its sessions this long after its last byte.
	SessionTimeout = 30 * time.Second
)

// reaskFactor and reaskJitter are the ask backoff's multiplier and randomisation factor
// (peer/provider.go's fetcherFor).
const (
	reaskFactor = 1.5
	reaskJitter = 0.5
)
