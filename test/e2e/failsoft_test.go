package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Sources fail soft: a weight peer that is down (a closed
// 127.0.0.1 port) or black-holed (a listener that accepts and never
// answers), and a registry that is down, are passed over: resolution goes
// on to the next peer, the registry, the local producers, then the
// canonical source in preferred mode; required fails only once every
// source was tried, naming each.

// resolveReport is the part of resolve --report a test reads.
type resolveReport struct {
	Identity string `json:"identity"`
	Outcome  string `json:"outcome"`
	Source   string `json:"source"`
	Path     string `json:"path"`
	Steps    []struct {
		Name    string `json:"name"`
		Source  string `json:"source"`
		Outcome string `json:"outcome"`
		Detail  string `json:"detail"`
	} `json:"steps"`
	Failure *struct {
		Kind string `json:"kind"`
	} `json:"failure"`
}

// passed is the report's steps that passed a source over, as
// "source: outcome (detail)".
func (r resolveReport) passed() []string {
	var out []string
	for _, s := range r.Steps {
		switch s.Name {
		case "lookup", "remote", "produce", "canonical":
		default:
			continue
		}
		if s.Outcome == "ok" || s.Outcome == "hit" {
			continue
		}
		src := s.Source
		if src == "" {
			src = "producers"
		}
		out = append(out, src+": "+s.Outcome+" ("+s.Detail+")")
	}
	return out
}

// TestResolveSourcesDown:
// the command of the issue, with one peer down, with every peer down or
// black-holed, with the registry down too, in preferred and required mode.
func TestResolveSourcesDown(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir, rootA, id := ociCheckpoint(t, "8MiB", 2)
	wsOK(t, rootA, "push", "--plain-http", id, reg.Ref("models/cold:v1"))
	up, down := reg.Host+"/models/cold", testenv.ClosedAddr(t)+"/models/cold"
	dead, dead2, hole := testenv.ClosedAddr(t), testenv.ClosedAddr(t), testenv.BlackHole(t)
	unreachable := func(src string) string { return src + ": failed (unreachable: " }
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		outcome  string // the report's
		source   string
		passed   []string // the report's steps that passed a source over, by their start
		mentions []string // in the error, on a failure
	}{
		{"one peer down", []string{"--peer", dead, "--registry", up}, 0, "fetched", "registry",
			[]string{"local: miss", unreachable("peer")}, nil},
		{"every peer down or black-holed", []string{"--peer", dead + "," + hole + "," + dead2, "--registry", up, "--mode", "required"}, 0,
			"fetched", "registry", []string{"local: miss", unreachable("peer")}, nil},
		{"peer and registry down: preferred builds from --from", []string{"--peer", dead, "--registry", down}, 0,
			"built", "producer:passthrough", []string{"local: miss", unreachable("peer"), unreachable("registry")}, nil},
		{"peer and registry down: preferred falls back to --from", []string{"--peer", dead, "--registry", down, "--allow-local-build=false"}, 0,
			"canonical", "canonical", []string{"local: miss", unreachable("peer"), unreachable("registry"), "producers: skipped (allow_local_build is off)"}, nil},
		{"registry down: required builds from --from", []string{"--registry", down, "--mode", "required"}, 0,
			"built", "producer:passthrough", []string{"local: miss", unreachable("registry")}, nil},
		{"peer and registry down: required fails naming every source", []string{"--peer", dead + "," + hole, "--registry", down,
			"--mode", "required", "--allow-local-build=false"}, 5, "failed", "",
			[]string{"local: miss", unreachable("peer"), unreachable("registry"), "producers: skipped (allow_local_build is off)",
				"canonical: skipped (required mode never falls back"},
			[]string{"no source served " + id, "local: miss", "peer: failed (unreachable", dead, hole, "connection refused", "i/o timeout",
				"registry: failed (unreachable", "producers: skipped", "canonical: skipped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "node")
			report := filepath.Join(t.TempDir(), "report.json")
			args := append([]string{"resolve", "--from", dir, "--revision", storetest.Revision, "--repository", "org/tiny",
				"--plain-http", "--connect-timeout", "1", "--report", report}, tc.args...)
			r := ws(t, root, args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, tc.code, r.out, r.errOut)
			}
			var rep resolveReport
			raw, _ := os.ReadFile(report)
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, raw)
			}
			if rep.Identity != id || rep.Outcome != tc.outcome || rep.Source != tc.source {
				t.Fatalf("identity %s outcome %s source %q, want %s %s %q\n%s", rep.Identity, rep.Outcome, rep.Source, id, tc.outcome, tc.source, raw)
			}
			passed := rep.passed()
			if len(passed) != len(tc.passed) {
				t.Fatalf("passed over:\n%s\nwant %d", strings.Join(passed, "\n"), len(tc.passed))
			}
			for i, p := range tc.passed {
				if !strings.HasPrefix(passed[i], p) {
					t.Errorf("step %d: %q, want %q…", i, passed[i], p)
				}
			}
			for _, m := range tc.mentions {
				if !strings.Contains(r.errOut, m) {
					t.Errorf("the error does not say %q:\n%s", m, r.errOut)
				}
			}
			switch rep.Outcome {
			case "canonical":
				if strings.TrimSpace(r.out) != dir {
					t.Errorf("printed %q, want the source %s", r.out, dir)
				}
			case "fetched", "built":
				if !strings.Contains(r.out, id[len("sha256:"):]) {
					t.Errorf("printed %q", r.out)
				}
				wsOK(t, root, "verify", "--full", id)
			}
		})
	}
}

// TestWeightsnapdPeersDown: a
// daemon whose [peer] peers are a closed port and a listener that never
// answers starts a cold container of a weight image (nerdctl run: its
// Prepare resolves) and pulls an artifact through its CRI socket (crictl
// pull), both from the registry; with the weights' registry down too, a
// required Prepare fails naming every source and why it was passed over.
func TestWeightsnapdPeersDown(t *testing.T) {
	harness.Peers(t)
	dead, hole := testenv.ClosedAddr(t), testenv.BlackHole(t)
	weights := &snapNode{reg: harness.StartRegistry(t)} // the artifacts' registry; stopped halfway
	n := &snapNode{reg: harness.StartRegistry(t)}       // the images'
	upstream := filepath.Join(harness.TempDir(t), "containerd.sock")
	n.ws = harness.StartWeightsnapd(t, harness.WeightsnapdOptions{Registries: []string{n.reg.Host, weights.reg.Host}, CRIUpstream: upstream,
		ExtraConfig: fmt.Sprintf("[peer]\npeers = [%q, %q]\nconnect_timeout_seconds = 1\n", dead, hole)})
	n.ctd = harness.StartContainerd(t, harness.ContainerdOptions{Registry: n.reg, Imports: []string{n.ws.ContainerdSnippet(t)}})
	if err := os.Symlink(n.ctd.Socket, upstream); err != nil {
		t.Fatal(err)
	}
	n.base = harness.PushBusybox(t, n.reg)
	x, y, z := weights.pushArtifact(t, "x", "8MiB", 2), weights.pushArtifact(t, "y", "4MiB", 1), weights.pushArtifact(t, "z", "6MiB", 1)
	imgX, imgY := n.buildImage(t, "x", "/models/x", x), n.buildImage(t, "y", "/models/y", y)

	// A cold container: its weight layer's Prepare passes both peers over.
	out, err := n.run(imgX, "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatalf("cold run with every peer down: %v", err)
	}
	checkSums(t, out, x)
	if got := n.metric(t, `weightsnap_snapshotter_resolve_seconds_count{outcome="fetched"}`); got != 1 {
		t.Fatalf("%v fetched, want 1:\n%s", got, must(n.ws.Metrics()))
	}
	if line := logLine(t, n.ws.Proc.Log, "resolve: the source is unreachable; trying the next source", ""); line < 0 {
		t.Fatalf("weightsnapd did not say the peers were passed over:\n%s", harness.Tail(n.ws.Proc.Log, 30))
	}

	// A CRI pull of an artifact: the daemon's own resolution.
	if out, err := n.ctd.Crictl("--image-endpoint", "unix://"+n.ws.CRI, "pull", z.ref); err != nil {
		t.Fatalf("CRI pull with every peer down: %v\n%s", err, out)
	}
	var list []struct {
		Digest string `json:"digest"`
	}
	if r := wsWith(t, n.ws.Config, "ls", "--json"); r.code != 0 || json.Unmarshal([]byte(r.out), &list) != nil {
		t.Fatalf("ls: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	held := map[string]bool{}
	for _, a := range list {
		held[a.Digest] = true
	}
	if !held[x.id] || !held[z.id] || held[y.id] {
		t.Fatalf("the store holds %v, want %s and %s", list, x.id, z.id)
	}

	// The weights' registry down too: required fails, naming every source.
	weights.reg.Proc.Stop()
	out, err = n.run(imgY, "true")
	if err == nil {
		t.Fatalf("a required weight layer ran with no source:\n%s", out)
	}
	for _, m := range []string{"no source served " + y.id, "local: miss", "peer: failed (unreachable", dead,
		"registry: failed (unreachable", weights.reg.Host, "connection refused"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("the failure does not say %q:\n%v", m, err)
		}
	}
}
