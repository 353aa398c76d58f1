package fleet

import (
	"testing"
	"time"
)

// holderBound bounds each resolve of TestFleetHolderMaxChildren: half the 30 s session deadline
// (peer.DefaultTimeout), so a node that waited on a session until its deadline fails the test. The
// round's copies, sixteen of 64 MiB down a tree of 400 Mbit/s links, take a few seconds; the rest
// is margin for a loaded machine.
const holderBound = 15 * time.Second

// holderMaxCopies bounds the origin's egress in TestFleetHolderMaxChildren: with a holder READY no
// payload should come from the origin (a node taking it would cost a whole copy); a tenth of a copy
// is the margin.
const holderMaxCopies = 0.1

// TestFleetHolderMaxChildren: one node holds the artifact READY, and sixteen others
// ask it at the same instant, with max_children 2. The holder never serves more than 2 sessions of
// it at once (asked every 50 ms during the round), the others take builders, each node is READY and
// verifies in full, no resolve takes longer than holderBound, and the origin sends at most
// holderMaxCopies.
func TestFleetHolderMaxChildren(t *testing.T) {
	const nodes, maxChildren = 17, 2
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	f.Run(Round{Nodes: 1}) // the holder: node 0 pulls from the registry alone
	ro := f.Launch(Round{Nodes: nodes, Peers: true, MaxChildren: maxChildren, Holders: 1})
	holder := f.nodes[0]
	most, asked := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ro.all:
				return
			case <-tick.C:
			}
			if l, err := f.list(holder); err == nil {
				asked++
				most = max(most, l.Children)
			}
		}
	}()
	r := ro.Wait()
	<-done
	t.Logf("%d nodes ask one holder (max_children %d): the holder served at most %d at once (%d listings); origin sent %d bytes (%.3f copies); first READY %.2fs, last %.2fs (each: %v); sources %v",
		nodes-1, maxChildren, most, asked, r.OriginBytes, r.Copies, r.First.Seconds(), r.Last.Seconds(), r.Ends, r.Sources)
	if asked == 0 {
		t.Fatal("the holder never answered a listing during the round")
	}
	if most > maxChildren {
		t.Fatalf("the holder served %d sessions of the artifact at once, more than max_children %d", most, maxChildren)
	}
	if r.Last > holderBound {
		t.Fatalf("the last node was READY after %v, past %v (each end: %v)", r.Last, holderBound, r.Ends)
	}
	if r.Copies > holderMaxCopies {
		t.Fatalf("the origin sent %.2f copies with a holder READY, more than %.2f", r.Copies, holderMaxCopies)
	}
}
