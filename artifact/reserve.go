package artifact

// Reserver is the part of a Writer that makes room for a whole artifact
// before its first payload byte: a producer that knows the artifact's size
// from its manifest calls Reserve with it first, so a build that cannot
// fit fails at once, before anything is fetched.
type Reserver interface {
	Reserve(total int64) error
}
