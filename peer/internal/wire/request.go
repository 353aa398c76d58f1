package wire

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// Request is a model request, parsed: an artifact by its identity or its
// manifest digest (the two have one form, sha256:<hex>, and a server looks
// it up as the one, then as the other), or an exported directory by name.
// Exactly one of ID and Export is set. A request for an artifact may name
// one stripe of it: the session then serves that stripe's pieces only.
type Request struct {
	ID     artifact.ID
	Export string // the name after ExportPrefix: NAME or NAME/SUBDIR
	Stripe Stripe
	// Slow says the session takes Stripe over from a slow source: a
	// server serves few such sessions of one stripe at once.
	Slow bool
}

// Stripe is one stripe of an artifact's pieces in a striped forest: piece
// i of the artifact's piece order belongs to stripe i mod Count. The zero
// Stripe is the whole artifact.
type Stripe struct {
	Index, Count int
}

// MaxStripes bounds a stripe's Count on the wire.
const MaxStripes = 1024

// stripeSep separates a request for an artifact from the stripe it names.
const stripeSep = " stripe="

// slowMark follows the stripe of a request that takes the stripe over
// from a slow source.
const slowMark = " slow"

// Has says whether piece i of the artifact's piece order is in the stripe.
func (s Stripe) Has(piece int64) bool {
	return s.Count == 0 || piece%int64(s.Count) == int64(s.Index)
}

// String is the stripe as a request writes it: INDEX/COUNT.
func (s Stripe) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// parseStripe parses INDEX/COUNT.
func parseStripe(v string) (Stripe, error) {
	i, k, ok := strings.Cut(v, "/")
	index, err1 := strconv.Atoi(i)
	count, err2 := strconv.Atoi(k)
	if !ok || err1 != nil || err2 != nil || count < 1 || count > MaxStripes || index < 0 || index >= count {
		return Stripe{}, fmt.Errorf("stripe %q: want INDEX/COUNT, 0 <= INDEX < COUNT <= %d: %w", v, MaxStripes, errdefs.ErrInvalidArgument)
	}
	return Stripe{Index: index, Count: count}, nil
}

// ParseRequest parses a model request as it is written on the wire and on
// the command line: sha256:<hex>, optionally followed by
// " stripe=INDEX/COUNT" and then " slow", or ExportPrefix NAME. The
// export's name is checked by the server that serves it.
func ParseRequest(s string) (Request, error) {
	if name, ok := strings.CutPrefix(s, ExportPrefix); ok {
		if name == "" {
			return Request{}, fmt.Errorf("model request %q: no exported directory named: %w", s, errdefs.ErrInvalidArgument)
		}
		return Request{Export: name}, nil
	}
	ref, stripe, striped := strings.Cut(s, stripeSep)
	id, err := artifact.ParseID(ref)
	if err != nil {
		return Request{}, fmt.Errorf("model request %q: want sha256:<identity or manifest digest> or %s<name>: %w", s, ExportPrefix, errdefs.ErrInvalidArgument)
	}
	q := Request{ID: id}
	if striped {
		stripe, q.Slow = strings.CutSuffix(stripe, slowMark)
		if q.Stripe, err = parseStripe(stripe); err != nil {
			return Request{}, fmt.Errorf("model request %q: %w", s, err)
		}
	}
	return q, nil
}

// String is the request as it is written on the wire.
func (q Request) String() string {
	if q.Export != "" {
		return ExportPrefix + q.Export
	}
	if q.Stripe.Count > 0 && q.Slow {
		return q.ID.String() + stripeSep + q.Stripe.String() + slowMark
	}
	if q.Stripe.Count > 0 {
		return q.ID.String() + stripeSep + q.Stripe.String()
	}
	return q.ID.String()
}

// Answers says whether the manifest is the answer to a model request.
func (m *WeightManifest) Answers(q Request) bool {
	if q.Export != "" {
		return m.Export == q.Export
	}
	return m.ID == q.ID || (m.ManifestDigest != "" && m.ManifestDigest.String() == q.ID.String())
}
