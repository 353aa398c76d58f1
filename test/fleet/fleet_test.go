// Package fleet measures a rollout of one artifact to many nodes at the same instant: N network
// namespaces on one bridge, each a node (its store on a tmpfs, `weightsnap peer serve`, and
// `weightsnap resolve` with the other nodes as its peers), the origin registry in its own namespace,
// every link shaped with tc to one rate, and the origin's egress counted on its interface.
//
// TestFleet (make test) runs a small fleet and asserts what must always hold: every node READY and
// `verify --full` clean on each, and the origin's egress at most 1.1 copies of the artifact (chain
// seeding; WEIGHTSNAP_FLEET_MAX_COPIES=X changes the bound); the fault tests (faults_test.go) and
// the holder test (holder_test.go) run beside it, TestFleetCorruptUnit with a weightsnap it builds
// with the faults tag. TestFleetBench (build tag bench, scripts/bench-fleet.sh, make bench)
// prints the table for N = 2, 4, 8, 16. Both need root, the pinned peers (test/e2e/deps), tc and
// flock, and `make build`'s bin/weightsnap; without them they skip with the reason (a failure under
// WEIGHTSNAP_REQUIRE_ALL=1).
package fleet

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// testRateMbit is TestFleet's link rate: fast, so the case stays short (about 5 s while every node
// pulls from the origin), and low enough that four nodes each receiving at it at once (1.6 Gbit/s, as
// with chain seeding) stay below the 3 Gbit/s one node alone gets unshaped on this 2-core machine
// (see benchRateMbit): the links, not the CPUs, bound it.
const testRateMbit = 400

// maxCopies bounds the origin's egress in TestFleet, in copies of the
// artifact: chain seeding makes one node the root and the others fetch from
// it (or from each other) while it builds. WEIGHTSNAP_FLEET_MAX_COPIES
// changes it.
const maxCopies = 1.1

// TestFleet: four nodes resolve a 64 MiB artifact at the same instant, each with the three others as
// its peers. Each is READY and verifies in full, and the origin sends at most maxCopies copies.
func TestFleet(t *testing.T) {
	f := Start(t, Options{Nodes: 4, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	r := f.Run(Round{Nodes: 4, Peers: true})
	t.Logf("%d nodes, %d MiB, %d Mbit/s links: origin sent %d bytes (%.2f copies); first READY %.2fs, last %.2fs; sources %v",
		r.Nodes, f.Bytes>>20, testRateMbit, r.OriginBytes, r.Copies, r.First.Seconds(), r.Last.Seconds(), r.Sources)
	limit := maxCopies
	if s := os.Getenv("WEIGHTSNAP_FLEET_MAX_COPIES"); s != "" {
		var err error
		if limit, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatalf("WEIGHTSNAP_FLEET_MAX_COPIES=%q: %v", s, err)
		}
	}
	if r.Copies > limit {
		t.Fatalf("the origin sent %.2f copies of the artifact, more than %.2f", r.Copies, limit)
	}
}

// TestFleetPrefetch: four nodes given the same
// prefetch file at the same instant each bring the artifact in and pin it,
// and the origin sends at most 1.1 copies: the prefetch resolves through
// the store, the peers, then the registry, as a pod's pull does.
func TestFleetPrefetch(t *testing.T) {
	f := Start(t, Options{Nodes: 4, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	r := f.Run(Round{Nodes: 4, Peers: true, Prefetch: true})
	t.Logf("prefetch on %d nodes: origin sent %.2f copies; first READY %.2fs, last %.2fs", r.Nodes, r.Copies, r.First.Seconds(), r.Last.Seconds())
	if r.Copies > maxCopies {
		t.Fatalf("the origin sent %.2f copies of the artifact, more than %.2f", r.Copies, maxCopies)
	}
	for i, n := range f.nodes[:4] {
		out, err := harness.Run("", f.ws, "--root", n.root, "--config", "", "inspect", f.ID)
		if err != nil || !strings.Contains(out, "pinned by prefetch:models.toml") {
			t.Fatalf("node %d: the prefetched artifact is not pinned by its file: %v\n%s", i, err, out)
		}
	}
}
