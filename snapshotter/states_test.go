package snapshotter

import (
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/weightsnap/weightsnap/pointer"
)

// TestStateOf: each state is recognised by its labels, and the labels a
// state keeps from the one before (LabelView on an emptied snapshot) do
// not hide it.
func TestStateOf(t *testing.T) {
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   weightState
		filled bool
	}{
		{"no labels", nil, stateOrdinary, false},
		{"an image's labels", map[string]string{"containerd.io/snapshot.ref": "sha256:ab"}, stateOrdinary, false},
		{"marks without pointer labels", map[string]string{LabelEmptied: "t", LabelView: "ab/cd"}, stateOrdinary, false},
		{"fallback", map[string]string{pointer.LabelIdentity: id, LabelFallback: "t"}, stateFallback, false},
		{"committed, not filled yet", map[string]string{pointer.LabelIdentity: id, LabelEmptied: "t"}, stateEmptied, false},
		{"emptied by a release", map[string]string{pointer.LabelIdentity: id, LabelEmptied: "t", LabelView: "ab/cd"}, stateEmptied, false},
		{"shared", map[string]string{pointer.LabelIdentity: id, LabelView: "ab/cd"}, stateShared, true},
		{"own view", map[string]string{pointer.LabelIdentity: id}, stateOwnView, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stateOf(snapshots.Info{Kind: snapshots.KindCommitted, Labels: tc.labels})
			if st != tc.want || st.filled() != tc.filled {
				t.Fatalf("state %s (filled %v), want %s (filled %v)", st, st.filled(), tc.want, tc.filled)
			}
		})
	}
}
