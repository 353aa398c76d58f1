package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/store"
)

// runCLIStderr runs the CLI in process and returns stdout, stderr and the
// error.
func runCLIStderr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{out: &out, errOut: &errOut}
	cmd := newRoot(a)
	cmd.SetArgs(args)
	cmd.SetOut(&errOut)
	cmd.SetErr(&errOut)
	err := exitcode.Execute(context.Background(), cmd)
	return out.String(), errOut.String(), err
}

// evictingDaemon is weightsnapd's eviction over the control API as a test
// sets it: the store it serves, what it says evicting each artifact frees,
// and the report it answers an eviction with; it keeps the requests.
type evictingDaemon struct {
	root   string
	d      *store.Domain
	frees  int64
	report evict.Report
	mu     sync.Mutex
	got    []control.EvictRequest
}

func (e *evictingDaemon) serve(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := control.Listen(context.Background(), sock, control.Services{Mounts: &holdsNothing{},
		Store: func() control.StoreInfo { return control.StoreInfo{Root: e.root} },
		Use: func(ctx context.Context) (any, error) {
			list, err := e.d.List(ctx)
			for _, info := range list {
				info.Use.Frees = e.frees
			}
			return list, err
		},
		Evict: func(_ context.Context, req control.EvictRequest) (any, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.got = append(e.got, req)
			return e.report, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return sock
}

// holdsNothing is a daemon's host mounts where nothing holds an artifact.
type holdsNothing struct{ recordingDaemon }

func (*holdsNothing) HoldersOf(id artifact.ID) (*control.Holders, error) {
	return &control.Holders{ID: id}, nil
}

// TestCommandsAskTheDaemon: ls --use, gc --evict and inspect show what
// weightsnapd says where it serves the store; where it does not answer, or
// serves another store, they say once on stderr that they speak for the
// store alone, and inspect says its leases are unknown.
func TestCommandsAskTheDaemon(t *testing.T) {
	ctx := context.Background()
	d, err := store.Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src, identity := storetest.Model(t, 1<<20, 60)
	id, err := storetest.Build(ctx, d, src, identity)
	if err != nil {
		t.Fatal(err)
	}
	const daemonFrees = 7 << 30 // what no store of this test holds: only the daemon says it
	held := store.Held{ID: artifact.MustParseID("sha256:" + strings.Repeat("ab", 32)), Bytes: 1 << 20, Why: "pinned by cli"}
	ours := &evictingDaemon{root: d.Root(), d: d, frees: daemonFrees,
		report: evict.Report{Need: 3 << 20, Freed: 1 << 20, DryRun: true, Evicted: []store.Evicted{{ID: id, Bytes: 1 << 20}}, Held: []store.Held{held}}}
	other := &evictingDaemon{root: t.TempDir(), d: d, frees: daemonFrees}
	config := func(sock string) string {
		f := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(f, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", d.Root(), sock)), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		daemon *evictingDaemon // nil: nobody serves the socket
		alone  string          // what stderr says of the store alone; "" for nothing
		status string
	}{
		{name: "the daemon serves the store", daemon: ours, status: daemonAnswered},
		{name: "the daemon is down", alone: "does not answer", status: daemonUnreachable},
		{name: "the daemon serves another store", daemon: other, alone: "serves the store at " + other.root, status: daemonOtherStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "absent.sock")
			if tc.daemon != nil {
				sock = tc.daemon.serve(t)
			}
			cfg := config(sock)
			checkStderr := func(what, stderr string) {
				t.Helper()
				if n := strings.Count(stderr, "speaks for the store alone"); (tc.alone == "" && n != 0) || (tc.alone != "" && (n != 1 || !strings.Contains(stderr, tc.alone))) {
					t.Errorf("%s: stderr %q, want the store-alone note %v saying %q", what, stderr, tc.alone != "", tc.alone)
				}
			}

			out, stderr, err := runCLIStderr(t, "--config", cfg, "ls", "--use")
			if err != nil || strings.Contains(out, bytefmt.IEC(daemonFrees)) != (tc.status == daemonAnswered) || strings.Contains(out, "unknown") == (tc.status == daemonAnswered) {
				t.Errorf("ls --use: %v\n%s", err, out)
			}
			checkStderr("ls --use", stderr)

			out, stderr, err = runCLIStderr(t, "--config", cfg, "gc", "--evict", "--dry-run", "--to", "1MiB", "--json")
			var rep struct {
				Evicted []store.Evicted `json:"evicted"`
				Held    []store.Held    `json:"held"`
				Daemon  string          `json:"daemon"`
			}
			if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || rep.Evicted == nil || rep.Held == nil || rep.Daemon != tc.status {
				t.Errorf("gc --evict --json: %v, %+v\n%s", jerr, rep, out)
			}
			checkStderr("gc --evict", stderr)
			if tc.daemon == ours {
				// The daemon's plan falls short of its target: exit 5, naming the pin.
				if exitcode.Of(err) != 5 || !strings.Contains(err.Error(), held.ID.Short()) || !strings.Contains(err.Error(), "pinned by cli") {
					t.Errorf("gc --evict short of its target: %v", err)
				}
				if got := ours.got[len(ours.got)-1]; got.To == nil || *got.To != 1<<20 || !got.DryRun {
					t.Errorf("the daemon got %+v", got)
				}
			} else if err != nil {
				t.Errorf("gc --evict --dry-run --to 1MiB of the store alone: %v", err)
			}

			out, _, err = runCLIStderr(t, "--config", cfg, "inspect", id.Hex()[:12], "--json")
			var j struct {
				Daemon string `json:"daemon"`
				Leases string `json:"leases"`
				Use    struct {
					Frees int64 `json:"frees_bytes"`
				} `json:"use"`
			}
			wantLeases := map[bool]string{true: leasesNone, false: leasesUnknown}[tc.status == daemonAnswered]
			if jerr := json.Unmarshal([]byte(out), &j); err != nil || jerr != nil || j.Daemon != tc.status || j.Leases != wantLeases || (j.Use.Frees == daemonFrees) != (tc.status == daemonAnswered) {
				t.Errorf("inspect --json: %v %v, %+v\n%s", err, jerr, j, out)
			}
			out, _, err = runCLIStderr(t, "--config", cfg, "inspect", id.Hex()[:12])
			if err != nil || strings.Contains(out, "leases unknown") == (tc.status == daemonAnswered) || strings.Contains(out, "leased false") {
				t.Errorf("inspect: %v\n%s", err, out)
			}
		})
	}
}

// pinnedStore makes a store under base whose only artifact is pinned, and
// returns its root: eviction there cannot go below that artifact's bytes.
func pinnedStore(t *testing.T, base string) string {
	t.Helper()
	ctx := context.Background()
	d, err := store.Open(ctx, filepath.Join(base, "pinned"), nil)
	if err != nil {
		t.Fatal(err)
	}
	src, identity := storetest.Model(t, 64<<10, 61)
	id, err := storetest.Build(ctx, d, src, identity)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Pin(ctx, id, store.Pin{By: store.PinByCLI, Reason: "golden"}); err != nil {
		t.Fatal(err)
	}
	return d.Root()
}

// TestPrefetchLsShowsInvalidFiles: prefetch ls lists a file the daemon
// cannot parse as invalid, with its error and its pins kept.
func TestPrefetchLsShowsInvalidFiles(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	broken := prefetch.Status{Declared: prefetch.Declared{File: "broken.toml"}, State: prefetch.StateInvalid,
		Error: "prefetch file broken.toml: toml: expected value"}
	srv, err := control.Listen(context.Background(), sock, control.Services{Mounts: &holdsNothing{},
		Prefetch: func() any { return []prefetch.Status{broken} }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, tc := range []struct {
		name string
		args []string
		says []string
	}{
		{name: "table", args: nil, says: []string{"broken.toml", "invalid", broken.Error, "its pins are kept"}},
		{name: "json", args: []string{"--json"}, says: []string{`"file": "broken.toml"`, `"state": "invalid"`, broken.Error}},
	} {
		out, err := runCLI(t, append([]string{"--config", "", "--control-address", sock, "prefetch", "ls"}, tc.args...)...)
		for _, want := range tc.says {
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("%s: %v, want it to say %q\n%s", tc.name, err, want, out)
			}
		}
	}
}
