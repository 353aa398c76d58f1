package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestPeerChainSeeding (issue 26, chain seeding): A fetches from a seed S
// over a slow link while B fetches from A and C from B, each from a node
// that is still building the artifact: every node ends with a verified
// artifact, S sends about one copy, and each child names its parent.
func TestPeerChainSeeding(t *testing.T) {
	harness.Peers(t)
	s, a, b, c := newNode(t, "cs"), newNode(t, "ca"), newNode(t, "cb"), newNode(t, "cc")
	sa, _ := harness.Link(t, s.ns, a.ns, "10.233.41.1/24", "10.233.41.2/24")
	harness.Link(t, a.ns, b.ns, "10.233.42.1/24", "10.233.42.2/24")
	harness.Link(t, b.ns, c.ns, "10.233.43.1/24", "10.233.43.2/24")
	id := s.seed(t, "256MiB", 4)
	throttle(t, s, sa) // about 5 s for the whole artifact: the chain forms while A builds
	const sAddr, aAddr, bAddr = "10.233.41.1:7420", "10.233.42.1:7420", "10.233.43.1:7420"
	s.serve(t, sAddr, a, sAddr)
	a.serve(t, aAddr, b, aAddr)
	b.serve(t, bAddr, c, bAddr)
	before := s.txBytes(t, sa)

	waitA := a.fetchAsync(t, sAddr, id)
	b.waitListed(t, aAddr, id)
	waitB := b.fetchAsync(t, aAddr, id)
	c.waitListed(t, bAddr, id)
	waitC := c.fetchAsync(t, bAddr, id)
	ra, rb, rc := waitA(), waitB(), waitC()
	for _, n := range []*node{a, b, c} {
		n.wsOK(t, "verify", "--full", id)
	}
	copies := float64(s.txBytes(t, sa)-before) / float64(ra.Bytes)
	t.Logf("A %.2fs, B %.2fs, C %.2fs; the seed sent %.2f copies", ra.Seconds, rb.Seconds, rc.Seconds, copies)
	if !ra.Built || !rb.Built || !rc.Built || rb.Peer != aAddr || rc.Peer != bAddr {
		t.Fatalf("reports: %+v %+v %+v", ra, rb, rc)
	}
	if copies > 1.1 {
		t.Fatalf("the seed sent %.2f copies, want one", copies)
	}
}

// waitListed waits until the peer at addr lists id, READY or building.
func (n *node) waitListed(t *testing.T, addr, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := n.ws(t, "peer", "ls", "--json", addr)
		if err != nil {
			continue
		}
		var ls struct {
			Artifacts []struct {
				IdentityDigest string `json:"identity_digest"`
				Building       bool   `json:"building"`
			} `json:"artifacts"`
		}
		if json.Unmarshal([]byte(out), &ls) != nil {
			continue
		}
		for _, x := range ls.Artifacts {
			if x.IdentityDigest == id || strings.TrimPrefix(x.IdentityDigest, "sha256:") == id {
				return
			}
		}
	}
	t.Fatalf("%s never listed %s", addr, id)
}
