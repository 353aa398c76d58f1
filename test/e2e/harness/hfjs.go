package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// HubReader runs the Hugging Face hub's own JavaScript cache reader
// (@huggingface/hub's scanCacheDir, pinned by test/e2e/hfjs/package-lock.json and installed by
// test/e2e/deps) through test/e2e/hfjs/scan.cjs.
type HubReader struct {
	Node    string // the node binary
	Modules string // the node_modules directory deps installed
	Script  string // test/e2e/hfjs/scan.cjs
}

// HubView is what scanCacheDir sees in a cache, as scan.cjs prints it: no host paths, no times.
type HubView struct {
	Size     int64     `json:"size"`
	Repos    []HubRepo `json:"repos"`
	Warnings []string  `json:"warnings"`
}

// HubRepo is one repository of a HubView.
type HubRepo struct {
	ID         string        `json:"id"`
	Type       string        `json:"type"`
	FilesCount int           `json:"filesCount"`
	Size       int64         `json:"size"`
	Revisions  []HubRevision `json:"revisions"`
}

// HubRevision is one snapshot of a HubRepo.
type HubRevision struct {
	Commit string    `json:"commit"`
	Refs   []string  `json:"refs"`
	Size   int64     `json:"size"`
	Files  []HubFile `json:"files"`
}

// HubFile is one file of a snapshot: its path there, its blob's size and name.
type HubFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Blob string `json:"blob"`
}

// FindHubReader returns the reader, skipping the test (see testenv.Skip) when node or the package is
// missing: the package from ${WEIGHTSNAP_PEERS:-$HOME/.cache/weightsnap/peers}/npm/current.
func FindHubReader(t testing.TB) *HubReader {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "no node on PATH: the Hugging Face hub's JavaScript reader cannot run")
	}
	root, err := peersRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "npm", "current"))
	modules := strings.TrimSpace(string(raw))
	if err == nil {
		_, err = os.Stat(filepath.Join(modules, "@huggingface", "hub", "package.json"))
	}
	if err != nil {
		testenv.Skip(t, fmt.Sprintf("@huggingface/hub not installed (run test/e2e/deps): %v", err))
	}
	mod, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return &HubReader{Node: node, Modules: modules, Script: filepath.Join(mod, "test", "e2e", "hfjs", "scan.cjs")}
}

// Scan runs scanCacheDir on the cache root dir.
func (r *HubReader) Scan(t testing.TB, dir string) HubView {
	t.Helper()
	out, err := RunEnv([]string{"HFJS_MODULES=" + r.Modules}, "", r.Node, r.Script, dir)
	if err != nil {
		t.Fatalf("scanCacheDir %s: %v", dir, err)
	}
	var v HubView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("scanCacheDir %s printed %q: %v", dir, out, err)
	}
	return v
}
