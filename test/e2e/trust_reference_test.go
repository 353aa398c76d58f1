//go:build containers_image_openpgp

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containers/image/v5/signature"
	"github.com/weightsnap/weightsnap/internal/cireference"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestCosignPolicyDecidesAsContainersImage: signatures made by the real
// cosign CLI in its legacy format (naming the repository, cosign's
// default, or with --sign-container-identity a tag, a digest or another
// repository; by the policy's key or another; or none) are judged by
// containers/image (the library CRI-O and podman decide with) and by
// `weightsnap verify-signature`, for pulls by tag and by digest, under
// every signedIdentity type; every pair agrees.
func TestCosignPolicyDecidesAsContainersImage(t *testing.T) {
	harness.Peers(t).Cosign(t)
	keys := cosignKeys(t, "k1", "k2")
	reg := harness.StartRegistry(t)
	_, root, id := ociCheckpoint(t, "1MiB", 1)
	sys := cireference.System(t)
	ctx := context.Background()

	cases := []struct{ name, key, names string }{ // names: "" cosign's default, "tag", "digest", "other"
		{"unsigned", "", ""},
		{"k1, cosign's default identity", "k1", ""},
		{"k1 names the tag", "k1", "tag"},
		{"k1 names the digest", "k1", "digest"},
		{"k1 names another repository", "k1", "other"},
		{"k2 names the tag", "k2", "tag"},
	}
	var pairs, accepted int
	for i, c := range cases {
		scope := reg.Ref(fmt.Sprintf("c%d", i))
		repo := scope + "/img"
		pushed := strings.TrimSpace(wsOK(t, root, "push", "--plain-http", id, repo+":v1"))
		if c.key != "" {
			args := []string{"sign", "--yes", "--key", filepath.Join(keys, c.key+".key"), "--allow-http-registry", "--allow-insecure-registry",
				"--use-signing-config=false", "--tlog-upload=false", "--new-bundle-format=false"}
			switch c.names {
			case "tag":
				args = append(args, "--sign-container-identity", repo+":v1")
			case "digest":
				args = append(args, "--sign-container-identity", pushed)
			case "other":
				args = append(args, "--sign-container-identity", scope+"/other:v1")
			}
			if out, err := cosignRun(t, keys, "pw", append(args, pushed)...); err != nil {
				t.Fatalf("cosign sign: %v\n%s", err, out)
			}
		}
		identities := []string{
			"",
			`{"type": "matchExact"}`,
			`{"type": "matchRepoDigestOrExact"}`,
			`{"type": "matchRepository"}`,
			`{"type": "exactReference", "dockerReference": "` + repo + `:v1"}`,
			`{"type": "exactRepository", "dockerRepository": "` + repo + `"}`,
			`{"type": "exactRepository", "dockerRepository": "` + scope + `/other"}`,
			`{"type": "remapIdentity", "prefix": "` + scope + `", "signedPrefix": "` + scope + `"}`,
		}
		for _, ref := range []string{repo + ":v1", pushed} {
			img := cireference.Open(t, sys, ref)
			for _, key := range []string{"k1.pub", "k2.pub"} {
				for _, identity := range identities {
					req := `{"type": "sigstoreSigned", "keyPath": "` + filepath.Join(keys, key) + `"`
					if identity != "" {
						req += `, "signedIdentity": ` + identity
					}
					doc := `{"default": [{"type": "reject"}], "transports": {"docker": {"` + scope + `": [` + req + `}]}}}`
					policy := filepath.Join(t.TempDir(), "policy.json")
					os.WriteFile(policy, []byte(doc), 0o644)
					pol, err := signature.NewPolicyFromBytes([]byte(doc))
					if err != nil {
						t.Fatal(err)
					}
					pc, err := signature.NewPolicyContext(pol)
					if err != nil {
						t.Fatal(err)
					}
					allowed, theirErr := pc.IsRunningImageAllowed(ctx, img)
					pc.Destroy()
					ours := ws(t, root, "verify-signature", "--plain-http", "--policy", policy, ref)
					pairs++
					if allowed {
						accepted++
					}
					if allowed != (ours.code == 0) {
						t.Errorf("%s, %s, policy %s:\n\tcontainers/image: %v %v\n\tweightsnap: exit %d %s", ref, c.name, doc, allowed, theirErr, ours.code, ours.errOut)
					}
				}
			}
		}
	}
	t.Logf("%d pairs, %d accepted by containers/image", pairs, accepted)
	if accepted == 0 || accepted == pairs {
		t.Fatalf("a degenerate matrix: %d of %d accepted", accepted, pairs)
	}
}
