//go:build faults_known_bug

package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Known bug (issue 26, Done-when 2, the root killed at a third of its pull), hence the build tag
// faults_known_bug, out of the default run: once the root dies, the other nodes are builders that
// all stopped at the same point (what the root had verified and sent them) and they wait on each
// other for units none of them will ever verify: each session ends at its 30 s deadline ("peer:
// waiting for model-00001-of-00002.safetensors ...: context deadline exceeded", or "read range
// status: i/o timeout"), no builder takes the origin for the units it lacks (no new root), and after
// "giving up after 5 failed sessions in 30s without progress" (about 2 minutes) some nodes go to the
// registry while others fail resolution ("resolve: remote (peer): remote: producer peer-fetch:
// giving up ..."). Run it with: go test -tags faults_known_bug -run TestFleetRootKilled ./test/fleet/

// TestFleetRootKilled (Done-when 2): five nodes start together; the root (the rendezvous top) is
// killed, its resolve and its peer serve, once the origin has sent a third of a copy. The four
// others finish, every one verifies in full, the killed node published nothing that does not, and
// the origin sends at most faultMaxCopies copies.
func TestFleetRootKilled(t *testing.T) {
	const nodes = 5
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	ro := f.Launch(Round{Nodes: nodes, Peers: true})
	root := ro.rootOf()
	if err := poll(time.Minute, func() error {
		if ro.Procs[root].Exited() {
			return nil // too late: the check below says so
		}
		if sent := ro.OriginTx(); sent < f.Bytes/3 {
			return fmt.Errorf("the origin sent %d of %d bytes", sent, f.Bytes/3)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ro.Procs[root].Exited() {
		t.Fatalf("the root (node %d) ended before the origin sent a third of a copy: %v\n%s", root, ro.Procs[root].Err(), harness.Tail(ro.Procs[root].Log, 20))
	}
	at := ro.OriginTx()
	ro.Kill(root)
	r := ro.Wait()
	t.Logf("root node %d killed with %d bytes sent by the origin (%.2f copies); in all the origin sent %.2f copies; last READY %.2fs; sources %v",
		root, at, float64(at)/float64(f.Bytes), r.Copies, r.Last.Seconds(), r.Sources)
	if r.Copies > faultMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, faultMaxCopies)
	}
}

// TestFleetHolderStrict is TestFleetHolderMaxChildren with each resolve bounded by 15 s, five times
// the 3 s the round takes without a stall, and the origin's egress by 0.1 copies. Known bugs, each
// seen in some runs: the builders answered busy by the holder wait on each other in a cycle until
// their sessions' 30 s deadline (see holderBound; 3 of the first 5 runs, last READY 33 s), and a node
// answered busy by the full holder (the rendezvous top, most likely: it does not ask again) takes
// the origin (see holderMaxCopies; 1 of 10 runs). Run it with: go test -tags faults_known_bug -run
// TestFleetHolderStrict -count=5 ./test/fleet/
func TestFleetHolderStrict(t *testing.T) { holderRound(t, 15*time.Second, 0.1) }
