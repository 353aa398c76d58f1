package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestPeerChainSeeding: A fetches from a seed S
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
	testenv.Eventually(t, 30*time.Second, func() bool {
		out, err := n.ws(t, "peer", "ls", "--json", addr)
		if err != nil {
			return false
		}
		var ls struct {
			Artifacts []struct {
				IdentityDigest string `json:"identity_digest"`
				Building       bool   `json:"building"`
			} `json:"artifacts"`
		}
		if json.Unmarshal([]byte(out), &ls) != nil {
			return false
		}
		for _, x := range ls.Artifacts {
			if x.IdentityDigest == id || strings.TrimPrefix(x.IdentityDigest, "sha256:") == id {
				return true
			}
		}
		return false
	}, "%s never listed %s", addr, id)
}

// TestPeerFleetOneRoot: three nodes, each a
// store served by `weightsnap peer serve` and listing the others as peers,
// resolve the same artifact at the same instant: the rendezvous root pulls
// it from the registry, the others take it from a peer, and the registry
// serves about one copy.
func TestPeerFleetOneRoot(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	_, rootA, id := ociCheckpoint(t, "64MiB", 4)
	wsOK(t, rootA, "push", "--plain-http", id, reg.Ref("fleet/one:v1"))
	proxy := newBlobProxy(t, reg)
	var info struct {
		Identity json.RawMessage `json:"identity"`
		Bytes    int64           `json:"total_bytes"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, rootA, "inspect", "--json", id)), &info); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	identityFile := filepath.Join(dir, "identity.json")
	os.WriteFile(identityFile, info.Identity, 0o644)
	addrs := []string{"127.0.0.1:7441", "127.0.0.1:7442", "127.0.0.1:7443"}
	var configs []string
	for i, addr := range addrs {
		cfg := filepath.Join(dir, fmt.Sprintf("node%d.toml", i))
		body := fmt.Sprintf("root = %q\n[peer]\nlisten = %q\nadvertise = %q\npeers = [%q, %q, %q]\n",
			filepath.Join(dir, fmt.Sprintf("store%d", i)), addr, addr, addrs[0], addrs[1], addrs[2])
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		configs = append(configs, cfg)
		p := harness.StartProcess(t, dir, fmt.Sprintf("serve%d", i), nil, weightsnapBin(t), "--config", cfg, "peer", "serve")
		if err := testenv.Wait(30*time.Second, func() error {
			if p.Exited() {
				return testenv.Final(errors.New("it exited"))
			}
			if r := wsWith(t, cfg, "peer", "ls", addr); r.code != 0 {
				return fmt.Errorf("peer ls: exit %d", r.code)
			}
			return nil
		}); err != nil {
			t.Fatalf("peer serve on %s did not answer: %v\n%s", addr, err, harness.Tail(p.Log, 20))
		}
	}
	type report struct {
		Outcome string `json:"outcome"`
		Source  string `json:"source"`
	}
	reports := make([]report, len(addrs))
	var wg sync.WaitGroup
	for i, cfg := range configs {
		wg.Go(func() {
			file := filepath.Join(dir, fmt.Sprintf("report%d.json", i))
			r := wsWith(t, cfg, "resolve", "--identity", identityFile, "--mode", "required",
				"--registry", proxy.host()+"/fleet/one", "--plain-http", "--report", file)
			raw, _ := os.ReadFile(file)
			if r.code != 0 || json.Unmarshal(raw, &reports[i]) != nil {
				t.Errorf("node %d: exit %d, report %s\n%s", i, r.code, raw, r.errOut)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fromRegistry := 0
	for i, r := range reports {
		if r.Source == "registry" {
			fromRegistry++
		}
		if r.Outcome != "fetched" {
			t.Fatalf("node %d: %+v", i, r)
		}
		if v := wsWith(t, configs[i], "verify", "--full", id); v.code != 0 {
			t.Fatalf("node %d: verify --full: %s%s", i, v.out, v.errOut)
		}
	}
	copies := float64(proxy.served.Load()) / float64(info.Bytes)
	t.Logf("sources %+v; the registry served %.2f copies", reports, copies)
	if fromRegistry != 1 || copies > 1.1 {
		t.Fatalf("%d nodes went to the registry, which served %.2f copies; want one root, one copy", fromRegistry, copies)
	}
}

// TestPeerChainSeedingRMA: a chain of three nodes
// over the rma plane (sockets provider): A pulls the artifact from the
// origin registry over a slow link, B fetches it over rma from A while A
// builds it, and C over rma from B while B builds it; every node ends READY
// with a verified artifact and each child names its parent.
func TestPeerChainSeedingRMA(t *testing.T) {
	harness.Peers(t)
	o, a, b, c := newNode(t, "ro"), newNode(t, "ra"), newNode(t, "rb"), newNode(t, "rc")
	a.rma, b.rma, c.rma = true, true, true
	oa, _ := harness.Link(t, o.ns, a.ns, "10.233.51.1/24", "10.233.51.2/24")
	harness.Link(t, a.ns, b.ns, "10.233.52.1/24", "10.233.52.2/24")
	harness.Link(t, b.ns, c.ns, "10.233.53.1/24", "10.233.53.2/24")
	reg := harness.StartRegistryIn(t, o.ns, "10.233.51.1:5000", filepath.Join(o.dir, "registry"))
	id := o.seed(t, "256MiB", 4)
	ref := reg.Ref("chain/rma:v1")
	o.wsOK(t, "push", "--plain-http", id, ref)
	throttle(t, o, oa) // about 5 s for the whole artifact: the chain forms while A pulls
	const aAddr, bAddr = "10.233.52.1:7420", "10.233.53.1:7420"
	a.serve(t, aAddr, b, aAddr)
	b.serve(t, bAddr, c, bAddr)

	pulled := make(chan error, 1)
	go func() {
		_, err := a.ws(t, "pull", "--plain-http", ref)
		pulled <- err
	}()
	b.waitListed(t, aAddr, id)
	waitB := b.fetchAsync(t, aAddr, id, "--mode", "rma")
	c.waitListed(t, bAddr, id)
	waitC := c.fetchAsync(t, bAddr, id, "--mode", "rma")
	select {
	case err := <-pulled:
		t.Fatalf("A's pull ended (%v) before C started: no chain formed while A built", err)
	default:
	}
	if err := <-pulled; err != nil {
		t.Fatal(err)
	}
	rb, rc := waitB(), waitC()
	for _, n := range []*node{a, b, c} {
		n.wsOK(t, "verify", "--full", id)
	}
	t.Logf("B %.2fs, C %.2fs over rma", rb.Seconds, rc.Seconds)
	if !rb.Built || !rc.Built || rb.Peer != aAddr || rc.Peer != bAddr || rb.Mode != "rma" || rc.Mode != "rma" {
		t.Fatalf("reports: %+v %+v", rb, rc)
	}
}
