package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
)

// TestPointerFoundAtCommit: a pointer layer prepared and applied as an
// ordinary layer (an unpack that passes no layer annotations) becomes a
// weight snapshot at Commit: linked when the artifact resolves (and leased
// by a container over it),
// a fallback in preferred mode when it does not, refused in required mode;
// a layer with anything besides the pointer, or an unusable pointer file,
// is committed as it is.
func TestPointerFoundAtCommit(t *testing.T) {
	ctx := context.Background()
	missing := elsewhere(t, storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 61}))
	for _, tc := range []struct {
		name    string
		mode    resolve.Mode
		missing bool                               // the artifact cannot be had
		edit    func(t *testing.T, dir, pf string) // after the pointer layer is "applied"
		want    string                             // weight, fallback, refused, ordinary
	}{
		{"resolves", resolve.Required, false, nil, "weight"},
		{"an older layer without the notice", resolve.Required, false, func(t *testing.T, dir, pf string) {
			if err := os.Remove(filepath.Join(dir, "models/m", pointer.NoticeName)); err != nil {
				t.Fatal(err)
			}
		}, "weight"},
		{"notice elsewhere", resolve.Required, false, func(t *testing.T, dir, pf string) {
			if err := os.Rename(filepath.Join(dir, "models/m", pointer.NoticeName), filepath.Join(dir, "models", pointer.NoticeName)); err != nil {
				t.Fatal(err)
			}
		}, "ordinary"},
		{"notice too large", resolve.Required, false, func(t *testing.T, dir, pf string) {
			os.WriteFile(filepath.Join(dir, "models/m", pointer.NoticeName), make([]byte, pointer.MaxNoticeBytes+1), 0o444)
		}, "ordinary"},
		{"missing, preferred", resolve.Preferred, true, nil, "fallback"},
		{"missing, required", resolve.Required, true, nil, "refused"},
		{"another file beside it", resolve.Required, false, func(t *testing.T, dir, _ string) {
			os.WriteFile(filepath.Join(dir, "etc-passwd"), []byte("x"), 0o644)
		}, "ordinary"},
		{"pointer file at another target", resolve.Required, false, func(t *testing.T, dir, pf string) {
			to := filepath.Join(dir, "elsewhere", pointer.Dir, filepath.Base(pf))
			os.MkdirAll(filepath.Dir(to), 0o755)
			if err := os.Rename(pf, to); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(dir, "models"))
		}, "ordinary"},
		{"not a pointer", resolve.Required, false, func(t *testing.T, _, pf string) {
			os.WriteFile(pf, []byte(`{"schema":1}`), 0o444)
		}, "ordinary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNodeMode(t, tc.mode)
			id := missing
			if !tc.missing {
				id = n.importModel(t, 128<<10, 62)
			}
			mounts, err := n.sn.Prepare(ctx, "extract", "")
			if err != nil {
				t.Fatal(err)
			}
			dir, _ := snapshotDir(mounts)
			ptr := pointer.Pointer{Schema: pointer.Schema, Artifact: "reg.example/m@sha256:" + strings.Repeat("2", 64), ID: artifact.MustParseID(id), Target: "/models/m"}
			writePointerLayer(t, dir, ptr)
			if tc.edit != nil {
				tc.edit(t, dir, filepath.Join(dir, pointer.Path(ptr)))
			}
			err = n.sn.Commit(ctx, chainID(60), "extract", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotRef: chainID(60)}))
			if tc.want == "refused" {
				if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), id) {
					t.Fatalf("commit: %v, want a miss naming the artifact", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			info, err := n.sn.Stat(ctx, chainID(60))
			if err != nil {
				t.Fatal(err)
			}
			got := "ordinary"
			switch {
			case info.Labels[LabelFallback] != "":
				got = "fallback"
			case info.Labels[pointer.LabelIdentity] == id:
				got = "weight"
			}
			if got != tc.want || info.Labels[snapshots.LabelSnapshotRef] != chainID(60) {
				t.Fatalf("committed as %s (%v), want %s", got, info.Labels, tc.want)
			}
			if leased := n.sn.leases.identities(); len(leased) != 0 {
				t.Fatalf("leases of a committed snapshot nothing uses: %v", leased)
			}
			if _, err := n.sn.Prepare(ctx, "container", chainID(60)); err != nil {
				t.Fatal(err)
			}
			if leased := n.sn.leases.identities(); (tc.want == "weight") != slices.Contains(leased, id) {
				t.Fatalf("leases of a container over it %v", leased)
			}
			cdir, _ := committedDir(ctx, n.sn.overlay, chainID(60))
			if tc.want == "weight" {
				if ents, _ := os.ReadDir(filepath.Join(cdir, "models/m")); len(ents) < 2 {
					t.Fatalf("the weights are not in the snapshot: %v", ents)
				}
			}
			// The notice says the weights are not mounted: gone once they
			// are, kept on a fallback.
			_, err = os.Stat(filepath.Join(cdir, pointer.NoticePath(ptr)))
			if hasNotice := err == nil; tc.want == "weight" && hasNotice || tc.want == "fallback" && !hasNotice {
				t.Fatalf("committed as %s, notice file there: %v", tc.want, hasNotice)
			}
		})
	}
}
