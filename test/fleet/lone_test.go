package fleet

import (
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestFleetIdleMembers: some members resolve while the others serve empty stores and want nothing,
// as most nodes of a cluster-wide member list (a headless Service) never ask for a given artifact.
// The artifact's rendezvous root among the members is idle, a root that never comes; the resolving
// node that takes the registry (the one ranked first, unless it started late) found no member
// ranked above it wanting the artifact (their peers list what their resolves look for) and says so
// in its log, and the other resolving nodes, seeing it want the artifact, take it from it. Every
// resolving node is READY and verifies in full, and the origin sends one copy. In the striped
// forest a node's sources there never build: it asks them for RootWait, then chooses as the chain
// does.
func TestFleetIdleMembers(t *testing.T) {
	for _, structure := range []string{"chain", "forest"} {
		t.Run(structure, func(t *testing.T) {
			f := Start(t, Options{Nodes: 8, Size: "16MiB", Shards: 2, RateMbit: testRateMbit})
			for _, tc := range []struct{ members, resolving int }{{6, 1}, {8, 4}} {
				// The members ranked second to resolving+1 resolve; the root and the rest idle.
				rank := f.ranking(f.nodes[:tc.members])
				idle := slices.Concat(rank[:1], rank[tc.resolving+1:])
				ro := f.Launch(Round{Nodes: tc.members, Peers: true, Idle: idle, Structure: structure})
				r := ro.Wait()
				t.Logf("%d of %d members resolve: origin sent %d bytes (%.2f copies); first READY %.2fs, last %.2fs; sources %v",
					tc.resolving, tc.members, r.OriginBytes, r.Copies, r.First.Seconds(), r.Last.Seconds(), r.Sources)
				if r.Copies > maxCopies {
					t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, maxCopies)
				}
				i := slices.IndexFunc(r.Reports, func(n NodeReport) bool { return n.Source == "fetched from registry" })
				if i < 0 {
					t.Fatalf("no resolving node took the registry: %v", r.Sources)
				}
				if p := ro.Procs[i]; logLine(t, p.Log, "no member ranked above this node wants the artifact") == "" {
					t.Fatalf("the log of node %d, which took the registry, does not say that no member ranked above it wants the artifact:\n%s", ro.index[i], harness.Tail(p.Log, 20))
				}
			}
		})
	}
}
