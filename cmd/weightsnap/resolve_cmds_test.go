package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/resolve"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	a := &app{out: &out, errOut: io.Discard}
	cmd := newRoot(a)
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := exitcode.Execute(context.Background(), cmd)
	return out.String(), err
}

func TestResolveCommand(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 2, DType: "BF16", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	storetest.Settle(t, src) // past the fingerprint cache's racy window
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, nil, 0o644)
	root := filepath.Join(base, "root")
	spec := filepath.Join(base, "spec.toml")
	os.WriteFile(spec, []byte("name = \"t\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n"), 0o644)
	common := []string{"--root", root, "--config", cfg, "resolve", "--from", src, "--revision", strings.Repeat("ab", 20)}

	// Disabled: the source, and nothing under the root.
	out, err := runCLI(t, "--root", filepath.Join(base, "absent"), "--config", cfg, "resolve", "--from", src, "--mode", "disabled")
	if err != nil || out != src+"\n" {
		t.Fatalf("disabled: %q %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(base, "absent")); !os.IsNotExist(err) {
		t.Fatal("disabled mode created the root")
	}

	for _, tc := range []struct {
		name    string
		args    []string
		outcome resolve.Outcome
		runs    int
	}{
		{"tp-split cold", []string{"--tp-size", "2", "--tp-rank", "1", "--layout-spec", spec, "--dtype", "F32"}, resolve.OutcomeBuilt, 1},
		{"tp-split warm", []string{"--tp-size", "2", "--tp-rank", "1", "--layout-spec", spec, "--dtype", "F32"}, resolve.OutcomeHit, 0},
		{"vllm-sharded cold", []string{"--tp-size", "1", "--layout", "vllm-sharded", "--max-part-size", "65536"}, resolve.OutcomeBuilt, 1},
		{"vllm-sharded warm", []string{"--tp-size", "1", "--layout", "vllm-sharded", "--max-part-size", "65536"}, resolve.OutcomeHit, 0},
		{"passthrough cold", nil, resolve.OutcomeBuilt, 1},
		{"required miss", []string{"--dtype", "F16", "--mode", "required", "--allow-local-build=false"}, resolve.OutcomeFailed, 0},
		{"preferred fallback", []string{"--dtype", "F16", "--allow-local-build=false"}, resolve.OutcomeCanonical, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			report := filepath.Join(base, "report.json")
			out, err := runCLI(t, append(append(append([]string{}, common...), tc.args...), "--report", report)...)
			var rep resolve.Report
			raw, _ := os.ReadFile(report)
			if jerr := json.Unmarshal(raw, &rep); jerr != nil {
				t.Fatalf("report: %v", jerr)
			}
			if rep.Outcome != tc.outcome || rep.Counters.ProducerRuns != tc.runs {
				t.Fatalf("%+v (err %v)", rep, err)
			}
			switch tc.outcome {
			case resolve.OutcomeFailed:
				if err == nil || out != "" || exitcode.Of(err) != 3 {
					t.Fatalf("failure: %q %v", out, err)
				}
			case resolve.OutcomeCanonical:
				if err != nil || out != src+"\n" {
					t.Fatalf("fallback: %q %v", out, err)
				}
			default:
				if err != nil || out != rep.Path+"\n" || !strings.HasPrefix(rep.Path, filepath.Join(root, "artifacts")) {
					t.Fatalf("path: %q %v", out, err)
				}
				// vLLM's layout: rank 0's parts (the 64 KiB bound makes
				// several), no source shard.
				parts, _ := filepath.Glob(filepath.Join(rep.Path, "model-rank-0-part-*.safetensors"))
				shards, _ := filepath.Glob(filepath.Join(rep.Path, "model-0000*.safetensors"))
				if vllm := strings.HasPrefix(tc.name, "vllm"); vllm != (len(parts) > 1) || vllm != (len(shards) == 0) {
					t.Fatalf("%d vLLM parts and %d source shards in %s", len(parts), len(shards), rep.Path)
				}
			}
		})
	}
}

func TestResolveConfigTableAndFlags(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := synth.Write(context.Background(), src, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: 4}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(base, "config.toml")
	root := filepath.Join(base, "root")
	os.WriteFile(cfg, []byte("[resolve]\nmode = \"disabled\"\n"), 0o644)
	common := []string{"--root", root, "--config", cfg, "resolve", "--from", src, "--revision", strings.Repeat("ef", 20)}
	// The table's mode: disabled, the source itself, nothing under the root.
	if out, err := runCLI(t, common...); err != nil || out != src+"\n" {
		t.Fatalf("config mode disabled: %q %v", out, err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatal("disabled mode from the config created the root")
	}
	// A flag overrides the table.
	out, err := runCLI(t, append(common, "--mode", "required")...)
	if err != nil || !strings.HasPrefix(out, filepath.Join(root, "artifacts")) {
		t.Fatalf("--mode required over the config: %q %v", out, err)
	}
	// Unknown keys in the table are refused.
	os.WriteFile(cfg, []byte("[resolve]\nbogus = 1\n"), 0o644)
	if _, err := runCLI(t, common...); err == nil {
		t.Fatal("an unknown [resolve] key was accepted")
	}
}

// countingProducer is a producer whose progress a test sets; it counts
// the looks at it.
type countingProducer struct{ done, looks atomic.Int64 }

func (*countingProducer) Name() string                                   { return "counting" }
func (*countingProducer) Produce(context.Context, artifact.Writer) error { return nil }
func (p *countingProducer) Progress() (int64, int64) {
	p.looks.Add(1)
	return p.done.Load(), 1000
}

// TestProducerProgress: while a producer runs, resolve shows how far it
// is, to the last byte once it stops.
func TestProducerProgress(t *testing.T) {
	var shown producerProgress
	p := &countingProducer{}
	shown.start("producer:tp-split", p)
	pr := shown.pr
	if pr == nil || pr.label != "tp-split" || pr.total != 1000 {
		t.Fatalf("progress %+v", pr)
	}
	p.done.Store(300)
	looked := p.looks.Load()
	testenv.Eventually(t, 10*time.Second, func() bool { return p.looks.Load() > looked }, "the progress was never looked at while at 300")
	p.done.Store(700)
	shown.stop(nil)
	if pr.done != 700 || shown.pr != nil {
		t.Fatalf("shown %d bytes, want 700", pr.done)
	}
	shown.start("registry", &struct{ artifact.Producer }{}) // says nothing of its progress: nothing shown
	if shown.pr != nil {
		t.Fatal("a producer that reports no progress got a progress bar")
	}
	shown.stop(nil)
}
