package wire

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
)

// TestRequest: a model request parses into an ID or an export once, is
// written back as it was read, and is answered by the manifest it names.
func TestRequest(t *testing.T) {
	id := artifact.MustParseID("sha256:" + strings.Repeat("ab", 32))
	md := digest.Digest("sha256:" + strings.Repeat("cd", 32))
	m := &WeightManifest{ID: id, ManifestDigest: md}
	exp := &WeightManifest{Export: "models/snapshots/0123"}
	for _, tc := range []struct {
		in      string
		want    Request
		answers *WeightManifest // a manifest that answers it
		not     *WeightManifest // one that does not
	}{
		{in: id.String(), want: Request{ID: id}, answers: m, not: exp},
		{in: md.String(), want: Request{ID: artifact.MustParseID(md.String())}, answers: m, not: exp},
		{in: "staged:models/snapshots/0123", want: Request{Export: "models/snapshots/0123"}, answers: exp, not: m},
		{in: id.String() + " stripe=3/16", want: Request{ID: id, Stripe: Stripe{Index: 3, Count: 16}}, answers: m, not: exp},
		{in: id.String() + " stripe=3/16 slow", want: Request{ID: id, Stripe: Stripe{Index: 3, Count: 16}, Slow: true}, answers: m, not: exp},
	} {
		q, err := ParseRequest(tc.in)
		if err != nil || q != tc.want || q.String() != tc.in {
			t.Errorf("ParseRequest(%q) = %+v, %v; String %q", tc.in, q, err, q.String())
		}
		if !tc.answers.Answers(q) || tc.not.Answers(q) {
			t.Errorf("%q: answered by the wrong manifest", tc.in)
		}
	}
	for _, bad := range []string{"", "staged:", "sha256:12", "model", "sha512:" + strings.Repeat("ab", 64),
		id.String() + " stripe=16/16", id.String() + " stripe=-1/4", id.String() + " stripe=0/0", id.String() + " stripe=3", id.String() + " stripe=0/2000",
		id.String() + " slow", id.String() + " stripe=3/16 fast"} {
		if _, err := ParseRequest(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseRequest(%q): %v, want invalid argument", bad, err)
		}
	}
}
