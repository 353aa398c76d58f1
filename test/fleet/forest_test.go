package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// The striped forest ([peer] structure = "forest") on eight nodes (two
// stripes): one node serving a corrupt piece, and one killed mid-transfer.
// Every other node ends READY with exact bytes (Wait: verify --full), and
// the origin sends about one copy.

// forestMaxCopies bounds the origin's egress in a forest round with a fault:
// the root alone takes the registry, whatever a member's source does.
const forestMaxCopies = 1.05

// forest is the striped forest of the fleet's artifact over nodes.
func (f *Fleet) forest(t *testing.T, nodes []*node) *stripes.Forest {
	id, err := artifact.ParseID(f.ID)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	forest, err := stripes.Place(id, addrs, stripes.DefaultStripes)
	if err != nil {
		t.Fatal(err)
	}
	return forest
}

// forestHead is the index, in nodes, of the head of the forest's first
// stripe: the second of the rendezvous ranking, a source of the nodes
// below it in that stripe.
func (f *Fleet) forestHead(t *testing.T, nodes []*node) int {
	second := f.forest(t, nodes).Ranking()[1]
	for i, n := range nodes {
		if n.addr == second {
			return i
		}
	}
	t.Fatalf("no node at %s", second)
	return -1
}

// TestFleetForestCorruptPiece: eight nodes start together in the forest; the head of the first
// stripe serves with a weightsnap built with the faults tag and WEIGHTSNAP_PEER_FAULT=corruptUnit,
// so it sends one of its children a piece with one byte flipped. The child refuses the piece (its
// check fails before a byte is written or forwarded), names the liar in its log, re-attaches to an
// adopter, and every node is READY and verifies in full, with one copy from the origin.
func TestFleetForestCorruptPiece(t *testing.T) {
	const nodes = 8
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	head := f.forestHead(t, f.nodes[:nodes])
	liar := f.nodes[head]
	liar.serveCmd = []string{"env", "WEIGHTSNAP_PEER_FAULT=" + corruptUnit, faultsBinary(t)}
	ro := f.Launch(Round{Nodes: nodes, Peers: true, Structure: "forest"})
	r := ro.Wait()
	if logLine(t, liar.serve.Log, "fault injected") == "" {
		t.Fatalf("node %d, the head of the first stripe, sent no corrupt piece (sources %v)", head, r.Sources)
	}
	named := ""
	for _, p := range ro.Procs {
		if l := logLine(t, p.Log, "failed its check", `peer="`+liar.addr+`"`); l != "" {
			named = l
		}
	}
	t.Logf("node %d sent a corrupt piece; the origin sent %.2f copies; last READY %.2fs; sources %v; the refusal: %s",
		head, r.Copies, r.Last.Seconds(), r.Sources, named)
	if named == "" {
		t.Fatalf("node %d sent a corrupt piece, and no node's log names %s as a source whose piece failed its check", head, liar.addr)
	}
	if r.Copies > forestMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, forestMaxCopies)
	}
}

// TestFleetForestKilled: eight nodes start together in the forest, on links a quarter of
// TestFleet's (the transfer outlasts a listing of the head); the head of the first stripe is
// killed, its resolve and its peer serve, once it has verified a quarter of the artifact. Its
// children re-attach to adopters, every other node is READY and verifies in full, and the origin
// sends at most forestMaxCopies copies.
func TestFleetForestKilled(t *testing.T) {
	const nodes = 8
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit / 4})
	ro := f.Launch(Round{Nodes: nodes, Peers: true, Structure: "forest"})
	head := f.forestHead(t, ro.Nodes)
	if err := poll(time.Minute, func() error {
		if l, err := f.list(ro.Nodes[head]); err == nil && l.Building && l.Verified >= f.Bytes/4 {
			return nil
		}
		return fmt.Errorf("node %d has not verified a quarter", head)
	}); err != nil {
		t.Fatal(err)
	}
	ro.Kill(head)
	r := ro.Wait()
	reattached := 0
	for i, p := range ro.Procs {
		if i != head && logLine(t, p.Log, "re-attaching", `peer="`+ro.Nodes[head].addr+`"`) != "" {
			reattached++
		}
	}
	t.Logf("node %d killed; %d nodes re-attached; the origin sent %.2f copies; last READY %.2fs; sources %v",
		head, reattached, r.Copies, r.Last.Seconds(), r.Sources)
	if reattached == 0 {
		t.Fatalf("node %d was killed and no node re-attached from it", head)
	}
	if r.Copies > forestMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, forestMaxCopies)
	}
}
