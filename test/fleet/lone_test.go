package fleet

import (
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestFleetLoneResolve: one node of six resolves while the five others serve empty stores and want
// nothing, as most nodes of a cluster-wide member list (a headless Service) never ask for a given
// artifact. The node is not the artifact's rendezvous root, so a root that never comes is what it
// would wait for; it finds no member ranked above it wanting the artifact (their peers list what
// their resolves look for) and takes the registry, saying why in its log. It is READY and verifies
// in full, and the origin sends one copy. In the striped forest its sources there never build: it
// asks them for RootWait, then chooses as the chain does.
func TestFleetLoneResolve(t *testing.T) {
	const nodes = 6
	for _, structure := range []string{"chain", "forest"} {
		t.Run(structure, func(t *testing.T) {
			f := Start(t, Options{Nodes: nodes, Size: "16MiB", Shards: 2, RateMbit: testRateMbit})
			if f.rootOf(f.nodes[:nodes]) == 0 {
				t.Fatalf("node 0 is the rendezvous root of %s among the %d nodes: the test needs one that is not", f.ID, nodes)
			}
			ro := f.Launch(Round{Nodes: nodes, Peers: true, Idle: nodes - 1, Structure: structure})
			r := ro.Wait()
			t.Logf("one node of %d resolves: origin sent %d bytes (%.2f copies); READY after %.2fs; sources %v", nodes, r.OriginBytes, r.Copies, r.Last.Seconds(), r.Sources)
			if logLine(t, ro.Procs[0].Log, "no member ranked above this node wants the artifact") == "" {
				t.Fatalf("the node's log does not say that no member ranked above it wants the artifact:\n%s", harness.Tail(ro.Procs[0].Log, 20))
			}
			if r.Copies > maxCopies {
				t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, maxCopies)
			}
		})
	}
}
