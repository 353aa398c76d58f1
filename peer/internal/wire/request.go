package wire

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// Request is a model request, parsed: an artifact by its identity or its
// manifest digest (the two have one form, sha256:<hex>, and a server looks
// it up as the one, then as the other), or an exported directory by name.
// Exactly one of ID and Export is set.
type Request struct {
	ID     artifact.ID
	Export string // the name after ExportPrefix: NAME or NAME/SUBDIR
}

// ParseRequest parses a model request as it is written on the wire and on
// the command line: sha256:<hex> or ExportPrefix NAME. The export's name
// is checked by the server that serves it.
func ParseRequest(s string) (Request, error) {
	if name, ok := strings.CutPrefix(s, ExportPrefix); ok {
		if name == "" {
			return Request{}, fmt.Errorf("model request %q: no exported directory named: %w", s, errdefs.ErrInvalidArgument)
		}
		return Request{Export: name}, nil
	}
	id, err := artifact.ParseID(s)
	if err != nil {
		return Request{}, fmt.Errorf("model request %q: want sha256:<identity or manifest digest> or %s<name>: %w", s, ExportPrefix, errdefs.ErrInvalidArgument)
	}
	return Request{ID: id}, nil
}

// String is the request as it is written on the wire.
func (q Request) String() string {
	if q.Export != "" {
		return ExportPrefix + q.Export
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
