package resolve

import (
	"slices"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
)

// SourcesError is a resolution that tried every source and that none
// served: each source in the order tried and why it was passed over. It
// is the Err of the terminal Failure, whose kind (and errdefs class) is
// that of the failure that decided the end: one that served bad bytes,
// else a retryable one, else the last. A trust policy's refusal of any
// source is in its chain (Unwrap), whichever failure decided the end.
type SourcesError struct {
	ID     artifact.ID // the identity asked for
	Passed []Passed
	// refused is the first policy refusal among the sources', nil when
	// none was refused.
	refused error
}

// Passed is one source a resolution passed over.
type Passed struct {
	// Source is local, a provider's name, producer:NAME, producers (when
	// none could run) or canonical.
	Source string
	// Outcome is its step's: miss, failed or skipped.
	Outcome string
	// Why is the step's reason: the failure's kind and message.
	Why string
}

func (e *SourcesError) Error() string {
	var b strings.Builder
	b.WriteString("no source served " + e.ID.String())
	for i, p := range e.Passed {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.Source + ": " + p.Outcome)
		if p.Why != "" {
			b.WriteString(" (" + p.Why + ")")
		}
	}
	return b.String()
}

// Unwrap is the trust policy's refusal of a source, or none when no source
// was refused. It is a list, never a nil error, since gRPC's error
// encoding (errgrpc) follows every Unwrap and cannot encode a nil one.
func (e *SourcesError) Unwrap() []error {
	if e.refused == nil {
		return nil
	}
	return []error{e.refused}
}

// sourceSteps are the steps that try a source.
var sourceSteps = map[string]bool{StepLookup: true, StepRemote: true, StepProduce: true, StepCanonical: true}

// exhausted is the terminal failure of a resolution every source passed
// over, last its last recoverable failure.
func (a *attempt) exhausted(last *Failure) *Failure {
	e := &SourcesError{ID: a.rep.ID}
	for _, s := range a.rep.Steps {
		if !sourceSteps[s.Name] || s.Outcome == StepOK || s.Outcome == StepHit {
			continue
		}
		src := s.Source
		if src == "" {
			src = s.Name
			if s.Name == StepProduce {
				src = "producers"
			}
		}
		e.Passed = append(e.Passed, Passed{Source: src, Outcome: s.Outcome, Why: s.Detail})
	}
	for _, f := range append(slices.Clone(a.rep.Recovered), last) {
		if isPolicyRefusal(f.Err) {
			e.refused = f.Err
			break
		}
	}
	decide := last
	for _, f := range a.rep.Recovered {
		if f.Kind == KindIntegrity || (f.Retry && decide.Kind != KindIntegrity && !decide.Retry) {
			decide = f
		}
	}
	return &Failure{Kind: decide.Kind, Step: decide.Step, Source: decide.Source, Retry: decide.Retry, Err: e}
}
