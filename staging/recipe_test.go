package staging_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/staging"
)

const goodRecipe = `# two lanes of one node
[[staging]]
id = "llama"
kind = "hub-mirror"
src = "/nas/hf/hub"
dst = "~/.cache/huggingface/hub"
repos = ["meta-llama/Llama-3.1-8B", "datasets/org/eval"]
skip = ["original", "*.pth"]
verify = "sample-hash"
min_free = "20GiB"
max_used = "80%"
emit_env = "HF_HUB_CACHE"
mount = "/root/.cache/huggingface/hub"

[[staging]]
id = "embed-r1"
kind = "sparse-rows"
src = "/nas/models/big"
dst = "/local/embed"
partition = "by-rank"
rank = 1
ranks = 4
min_free = 1073741824
keep_in_memory = "8GiB"
[[staging.tables]]
name = "model.embed_tokens.weight"
rows = "auto"
[[staging.tables]]
name = "lm_head.weight"
rows = "0:1000"
`

func TestParseRecipe(t *testing.T) {
	r, err := staging.ParseRecipe("good.toml", []byte(goodRecipe))
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	hub, emb := r.Blocks[0], r.Blocks[1]
	switch {
	case hub.Dst != filepath.Join(home, ".cache/huggingface/hub"):
		t.Fatalf("dst %q: ~ not expanded", hub.Dst)
	case hub.Verify != staging.VerifySample || hub.MinFree != 20<<30 || hub.MaxUsed.Limit(1000) != 800:
		t.Fatalf("hub lane %+v", hub)
	case emb.Verify != staging.VerifyFull || emb.MaxUsed.Limit(1000) != 750 || emb.MinFree != 1<<30 || emb.KeepInMemory != 8<<30:
		t.Fatalf("defaults of the sparse lane: %+v", emb)
	case *emb.Rank != 1 || *emb.Ranks != 4 || len(emb.Tables) != 2 || !emb.Tables[0].Rows.Auto || emb.Tables[1].Rows.End != 1000:
		t.Fatalf("sparse lane %+v", emb)
	}
	if env := hub.Env(nil); len(env) != 1 || env[0] != "HF_HUB_CACHE=/root/.cache/huggingface/hub" {
		t.Fatalf("env %q", env)
	}
}

// Unknown keys and bad values name the key and its line.
func TestRecipeErrors(t *testing.T) {
	base := "[[staging]]\nid = \"x\"\nkind = \"hub-mirror\"\nsrc = \"/s\"\ndst = \"/d\"\n" // lines 1-5
	sparse := "[[staging]]\nid = \"y\"\nkind = \"sparse-rows\"\nsrc = \"/s\"\ndst = \"/d\"\n"
	for _, tc := range []struct {
		name, doc, key string
		line           int
	}{
		{"unknown key", base + "verfy = \"full\"\n", "staging[0].verfy", 6},
		{"unknown table key", sparse + "ranks = 2\nrank = 0\n[[staging.tables]]\nname = \"t\"\nsize = 3\n", "staging[0].tables[0].size", 10},
		{"bad verify", base + "\n\nverify = \"quick\"\n", "staging[0].verify", 8},
		{"bad kind", strings.Replace(base, "hub-mirror", "rsync", 1), "staging[0].kind", 3},
		{"missing src", strings.Replace(base, "src = \"/s\"\n", "", 1), "staging[0].src", 1},
		{"relative dst", strings.Replace(base, "/d", "d", 1), "staging[0].dst", 5},
		{"bad size", base + "min_free = \"lots\"\n", "staging[0].min_free", 6},
		{"wrong type", base + "repos = \"org/a\"\n", "staging[0].repos", 6},
		{"bad watermark", base + "max_used = \"150%\"\n", "staging[0].max_used", 6},
		{"bad repo", base + "repos = [\"org/a\", \"../etc\"]\n", "staging[0].repos", 6},
		{"sparse key on a mirror", base + "rank = 1\n", "staging[0].rank", 6},
		{"rank out of range", sparse + "ranks = 4\nrank = 4\ntables = [{name = \"t\"}]\n", "staging[0].rank", 7},
		{"bad rows", sparse + "ranks = 1\nrank = 0\ntables = [{name = \"t\", rows = \"9:3\"}]\n", "staging[0].tables[0].rows", 8},
		{"no tables", sparse + "ranks = 1\nrank = 0\n", "staging[0].tables", 1},
		{"second block", base + sparse + "ranks = 2\nrank = 0\ntables = [{name = \"t\"}]\nemit_env = \"1BAD\"\n", "staging[1].emit_env", 14},
		{"duplicate id", base + strings.Replace(base, "hub-mirror", "hub-mirror", 1), "staging[1].id", 7},
		{"bad mount", base + "mount = \"models\"\n", "staging[0].mount", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := staging.ParseRecipe("r.toml", []byte(tc.doc))
			if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "recipe r.toml") {
				t.Fatalf("error %v, want a recipe error", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("r.toml:%d: %s: ", tc.line, tc.key)) {
				t.Fatalf("error %q does not name %s at line %d", err, tc.key, tc.line)
			}
			if !strings.Contains(err.Error(), "r.toml:") || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("message %q lacks the file, line or key", err)
			}
		})
	}
}
