package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestSigningRecipe runs docs/trust.md's recipe for signing with the pinned cosign as written, in
// one shell, against a local registry (registry.example is it; cosign and weightsnap talk plain
// HTTP to it): a key pair, a push, a cosign v3 bundle and a legacy signature naming the tag, both
// offline. Both checks of the recipe's policy verify: the pull by digest and the pull by tag.
func TestSigningRecipe(t *testing.T) {
	tools := harness.Peers(t)
	cosign := tools.Cosign(t)
	repo, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	recipe := shBlock(t, filepath.Join(repo, "docs", "trust.md"), "### Signing with the cosign the installer pins")
	work := harness.TempDir(t)
	cli := buildCLI(t, repo, work)
	sums := model(t, cli, work)
	reg := harness.StartRegistry(t)
	recipe = substitute(t, recipe, map[string]string{
		"registry.example":            reg.Host,
		"7a1b70":                      strings.TrimPrefix(sums.id, "sha256:")[:6],
		"cosign sign":                 "cosign sign --allow-http-registry --allow-insecure-registry",
		"weightsnap push":             "weightsnap push --plain-http",
		"weightsnap verify-signature": "weightsnap verify-signature --plain-http",
	})
	// One shell, so that what one command sets ($REF) the next reads; a marker before each
	// command splits the output.
	const marker = "=== recipe command"
	script := []string{"set -eu"}
	for _, c := range recipe {
		script = append(script, "echo '"+marker+"'", strings.ReplaceAll(c, "\n", " "))
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "recipe.sh")
	if err := os.WriteFile(file, []byte(strings.Join(script, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + filepath.Dir(cosign) + ":" + work + ":" + os.Getenv("PATH"), "HOME=" + dir, "COSIGN_PASSWORD=pw",
		"WEIGHTSNAP_ROOT=" + filepath.Join(work, "src"), "WEIGHTSNAP_CONFIG="}
	out, err := harness.RunEnv(env, dir, "bash", file)
	if err != nil {
		t.Fatalf("the signing recipe failed: %v\n%s", err, out)
	}
	outs := strings.Split(out, marker+"\n")[1:]
	if len(outs) != len(recipe) {
		t.Fatalf("%d outputs of %d commands:\n%s", len(outs), len(recipe), out)
	}
	checks := 0
	for i, c := range recipe {
		if !strings.Contains(c, "verify-signature") {
			continue
		}
		checks++
		if !strings.Contains(outs[i], "sigstoreSigned") || strings.Contains(outs[i], "refuses") {
			t.Errorf("%s: want the key's signature to meet the policy:\n%s", c, outs[i])
		}
	}
	if checks != 2 {
		t.Fatalf("the recipe checks %d pulls, want the pull by digest and the pull by tag:\n%s", checks, strings.Join(recipe, "\n"))
	}
}
