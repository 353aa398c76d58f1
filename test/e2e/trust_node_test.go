package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// startTrustNode starts a node whose weightsnapd (snapshotter and CRI
// image service in front of containerd) runs under the trust policy file
// policyOf returns for its registry.
func startTrustNode(t *testing.T, policyOf func(reg *harness.Registry) string) *snapNode {
	t.Helper()
	return startTrustNodeOpts(t, harness.WeightsnapdOptions{}, policyOf)
}

// startTrustNodeOpts is startTrustNode with the daemon's options (its
// registry, CRI upstream and [verify] table are added).
func startTrustNodeOpts(t *testing.T, opts harness.WeightsnapdOptions, policyOf func(reg *harness.Registry) string) *snapNode {
	t.Helper()
	harness.Peers(t)
	n := &snapNode{reg: harness.StartRegistry(t)}
	upstream := filepath.Join(harness.TempDir(t), "containerd.sock")
	opts.Registries, opts.CRIUpstream = append(opts.Registries, n.reg.Host), upstream
	opts.ExtraConfig += fmt.Sprintf("\n[verify]\npolicy = %q\n", policyOf(n.reg))
	n.ws = harness.StartWeightsnapd(t, opts)
	n.ctd = harness.StartContainerd(t, harness.ContainerdOptions{Registry: n.reg, Imports: []string{n.ws.ContainerdSnippet(t)}})
	if err := os.Symlink(n.ctd.Socket, upstream); err != nil {
		t.Fatal(err)
	}
	harness.PushPause(t, n.reg)
	n.base = n.reg.Ref("busybox:latest") // pushed by PushPause
	return n
}

// pinned is ref (a tag) pinned by its manifest digest.
func pinned(t *testing.T, ref string) string {
	t.Helper()
	name, _, _ := strings.Cut(ref[strings.LastIndex(ref, "/"):], ":")
	repo := ref[:strings.LastIndex(ref, "/")] + name
	return repo + "@" + strings.TrimSpace(orasRun(t, t.TempDir(), "resolve", "--plain-http", ref))
}

// attachBundleOf attaches the cosign bundle that signs from (a pinned
// reference) to to as its signature referrer: the right key's signature
// over another manifest.
func attachBundleOf(t *testing.T, from, to string) {
	t.Helper()
	dir := t.TempDir()
	var refs struct {
		Referrers []struct {
			Digest       string `json:"digest"`
			ArtifactType string `json:"artifactType"`
		} `json:"referrers"`
	}
	if err := json.Unmarshal([]byte(orasRun(t, dir, "discover", "--plain-http", "--distribution-spec", "v1.1-referrers-tag", "--format", "json", from)), &refs); err != nil || len(refs.Referrers) == 0 {
		t.Fatalf("referrers of %s: %v %+v", from, err, refs)
	}
	repo, _, _ := strings.Cut(from, "@")
	var m struct {
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(orasRun(t, dir, "manifest", "fetch", "--plain-http", repo+"@"+refs.Referrers[0].Digest)), &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("signature referrer of %s: %v %+v", from, err, m)
	}
	orasRun(t, dir, "blob", "fetch", "--plain-http", "--output", "bundle.json", repo+"@"+m.Layers[0].Digest)
	orasRun(t, dir, "attach", "--plain-http", "--distribution-spec", "v1.1-referrers-tag", "--artifact-type", "application/vnd.dev.sigstore.bundle.v0.3+json",
		to, "bundle.json:application/vnd.dev.sigstore.bundle.v0.3+json")
}

// TestTrustPolicyEnforced: with a policy that
// requires a signature by one key for one repository namespace, an
// artifact signed with that key by the real cosign CLI pulls
// (weightsnap pull) and runs, through weightsnapd's snapshotter
// (nerdctl run of its weight image) and its CRI image service (a pod's
// image volume), and the daemon's store records how it was verified. One
// unsigned, one signed by another key and one whose signature covers
// another manifest are each refused by weightsnap pull, by weightsnapd's
// Prepare and by the CRI pull, naming the scope, and the daemon's store
// holds none of them. An artifact of another repository pulls unsigned.
func TestTrustPolicyEnforced(t *testing.T) {
	harness.Peers(t).Cosign(t)
	keys := cosignKeys(t, "k1", "k2")
	var policy, scope string
	n := startTrustNode(t, func(reg *harness.Registry) string {
		scope = reg.Ref("models/signed")
		policy, _ = signedPolicy(t, scope, filepath.Join(keys, "k1.pub"))
		return policy
	})
	type tc struct {
		name, size, refusal string
		a                   *pushedArtifact
		img                 string
	}
	cases := []*tc{
		{name: "signed/good", size: "4MiB"},
		{name: "free", size: "3MiB"},
		{name: "signed/bare", size: "2MiB", refusal: "no signature found"},
		{name: "signed/other", size: "5MiB", refusal: "no signature by a key or identity the policy trusts"},
		{name: "signed/swap", size: "1MiB", refusal: "does not match any digest in statement"},
	}
	for _, c := range cases {
		c.a = n.pushArtifact(t, c.name, c.size, 1)
		c.a.ref = pinned(t, c.a.ref)
		c.img = n.buildImage(t, strings.ReplaceAll(c.name, "/", "-"), "/models/x", c.a)
	}
	cosignSign(t, keys, "k1.key", cases[0].a.ref)
	cosignSign(t, keys, "k2.key", cases[3].a.ref)
	attachBundleOf(t, cases[0].a.ref, cases[4].a.ref)
	crictl(t, n.ctd, "pull", n.base)
	criPull := func(ref string) (string, error) {
		return n.ctd.Crictl("--image-endpoint", "unix://"+n.ws.CRI, "pull", ref)
	}
	held := func(a *pushedArtifact) bool {
		r := wsWith(t, n.ws.Config, "ls", "--json")
		if r.code != 0 {
			t.Fatalf("weightsnap ls: exit %d\n%s", r.code, r.errOut)
		}
		return strings.Contains(r.out, a.hex)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pull := ws(t, t.TempDir(), "pull", "--plain-http", "--policy", policy, c.a.ref)
			out, runErr := n.run(c.img, "sh", "-c", "cd /models/x && sha256sum *")
			criOut, criErr := criPull(c.a.ref)
			if c.refusal == "" {
				if pull.code != 0 {
					t.Fatalf("weightsnap pull: exit %d\n%s", pull.code, pull.errOut)
				}
				if runErr != nil {
					t.Fatalf("nerdctl run of %s: %v\n%s", c.img, runErr, out)
				}
				checkSums(t, out, c.a)
				if criErr != nil {
					t.Fatalf("CRI pull of %s: %v\n%s", c.a.ref, criErr, criOut)
				}
				checkSums(t, runReaderPod(t, n.ctd, readerPod{name: strings.ReplaceAll(c.name, "/", "-"), image: n.base, dir: "/models/model", volume: c.a.ref}), c.a)
				return
			}
			if pull.code == 0 || !strings.Contains(pull.errOut, `scope "`+scope+`"`) || !strings.Contains(pull.errOut, c.refusal) {
				t.Fatalf("weightsnap pull: exit %d, want a refusal naming scope %s and %q\n%s", pull.code, scope, c.refusal, pull.errOut)
			}
			for what, err := range map[string]error{"weightsnapd's Prepare (nerdctl run)": runErr, "the CRI pull": criErr} {
				if err == nil || !strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), "refuses it") {
					t.Fatalf("%s: %v, want a refusal naming scope %s", what, err, scope)
				}
			}
			if held(c.a) {
				t.Fatalf("the daemon's store holds the refused artifact %s", c.a.id)
			}
		})
	}
	if out := wsWith(t, n.ws.Config, "inspect", cases[0].a.id); !strings.Contains(out.out, "Verified:  verified\n  "+cases[0].a.ref+"\n") {
		t.Fatalf("inspect of the signed artifact in the daemon's store:\n%s%s", out.out, out.errOut)
	}
	if out := wsWith(t, n.ws.Config, "inspect", cases[1].a.id); !strings.Contains(out.out, "Verified:  unverified\n") {
		t.Fatalf("inspect of the unsigned artifact of another repository:\n%s%s", out.out, out.errOut)
	}
}
