package fleet

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
)

// TestFleetNodeNeverStarted: every node's peer list names a fifth node that never
// started, an address of the fleet's subnet that no namespace holds (its dial fails once ARP gives
// up, or at the connect timeout), and that address is the artifact's rendezvous root, the node the
// others would wait for to pull from the registry. The four nodes pass it over: each is READY and
// verifies in full, and, agreeing on a live root, the origin still sends at most maxCopies copies.
// In the striped forest the absent node is the forest's root: a stripe whose source it is
// re-attaches to the first live member of the ranking, which alone takes the registry, and the
// origin sends at most absentRootCopies copies.
// absentRootCopies bounds the origin's copies in the forest whose root never started: one member
// takes the registry, and the others take every stripe from the members.
const absentRootCopies = 1.02

func TestFleetNodeNeverStarted(t *testing.T) {
	for _, structure := range []string{"chain", "forest"} {
		t.Run(structure, func(t *testing.T) {
			f := Start(t, Options{Nodes: 4, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
			absent := f.absentRoot(f.nodes[:4])
			r := f.Run(Round{Nodes: 4, Peers: true, Absent: []string{absent}, Structure: structure})
			t.Logf("%d nodes and %s absent: origin sent %d bytes (%.2f copies); first READY %.2fs, last %.2fs; sources %v",
				r.Nodes, absent, r.OriginBytes, r.Copies, r.First.Seconds(), r.Last.Seconds(), r.Sources)
			limit := maxCopies
			if structure == "forest" {
				limit = absentRootCopies
			}
			if r.Copies > limit {
				t.Fatalf("the origin sent %.2f copies of the artifact, more than %.2f: the nodes did not agree on a live root", r.Copies, limit)
			}
		})
	}
}

// absentRoot is an address of the fleet's subnet that no node holds and that ranks above every one
// of nodes for the fleet's artifact (rootOf's ranking).
func (f *Fleet) absentRoot(nodes []*node) string {
	f.t.Helper()
	score := func(addr string) uint64 {
		h := sha256.Sum256([]byte(f.ID + "\x00" + addr))
		return binary.BigEndian.Uint64(h[:])
	}
	top := nodes[f.rootOf(nodes)].addr
	for host := 200; host < 255; host++ {
		if addr := fmt.Sprintf("%s%d:%d", subnet, host, peerPort); score(addr) > score(top) {
			return addr
		}
	}
	f.t.Fatalf("no address of %s200-254 ranks above %s", subnet, top)
	return ""
}
