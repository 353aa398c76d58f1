package trust

import "sync/atomic"

// Source is where a decision reads the policy it applies, at the time it
// decides.
type Source interface {
	// Current is the policy in force; nil means no check.
	Current() *Policy
}

// Current makes a policy the Source of itself, for a policy that never
// changes.
func (p *Policy) Current() *Policy {
	return p
}

// Holder is a Source whose policy a reload replaces while decisions read it.
type Holder struct {
	p atomic.Pointer[Policy]
}

// NewHolder returns a Holder of p.
func NewHolder(p *Policy) *Holder {
	h := &Holder{}
	h.p.Store(p)
	return h
}

// Current implements Source.
func (h *Holder) Current() *Policy {
	return h.p.Load()
}

// Set replaces the policy later decisions read.
func (h *Holder) Set(p *Policy) {
	h.p.Store(p)
}
