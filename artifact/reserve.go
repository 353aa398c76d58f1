package artifact

// Reserver is implemented by writers (the store's builds) that can make
// room for a whole artifact before its first payload byte: a producer that
// knows the artifact's size from its manifest calls Reserve with it first,
// so a build that cannot fit fails at once, before anything is fetched.
type Reserver interface {
	Reserve(total int64) error
}

// Reserve asks w for room for total bytes if it can make room.
func Reserve(w Writer, total int64) error {
	if r, ok := w.(Reserver); ok {
		return r.Reserve(total)
	}
	return nil
}
