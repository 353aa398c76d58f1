package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weightsnap/weightsnap/trust"
)

const (
	acceptPolicy = `{"default": [{"type": "insecureAcceptAnything"}]}`
	rejectPolicy = `{"default": [{"type": "reject"}]}`
	brokenPolicy = `{"default": [{"type": "reject"}`
)

// TestPolicyWatchReload runs one watch through a sequence of changes to
// its file: each step changes the file, reloads, and checks the policy
// every decision reads, the error and the metrics.
func TestPolicyWatchReload(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	write := func(content string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace := func(content string) func(t *testing.T) {
		return func(t *testing.T) {
			tmp := filepath.Join(dir, "policy.json.new")
			if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove := func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	write(acceptPolicy)(t)
	w, err := newPolicyWatch(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		change  func(t *testing.T)
		force   bool // a SIGHUP
		wantErr bool
		want    string // the default requirement's type after the step
		errors  float64
		success float64
	}{
		{"unchanged", nil, false, false, trust.TypeAcceptAnything, 0, 1},
		{"edited in place", write(rejectPolicy), false, false, trust.TypeReject, 0, 1},
		{"replaced by rename", replace(acceptPolicy), false, false, trust.TypeAcceptAnything, 0, 1},
		{"a broken edit keeps the last good policy", write(brokenPolicy), false, true, trust.TypeAcceptAnything, 1, 0},
		{"the same broken file is not reported again", nil, false, false, trust.TypeAcceptAnything, 1, 0},
		{"a SIGHUP reports it again", nil, true, true, trust.TypeAcceptAnything, 2, 0},
		{"fixed", replace(rejectPolicy), false, false, trust.TypeReject, 2, 1},
		{"a SIGHUP of a good file applies it", nil, true, false, trust.TypeReject, 2, 1},
		{"a vanished file keeps the last good policy", remove, false, true, trust.TypeReject, 3, 0},
		{"back again", write(acceptPolicy), false, false, trust.TypeAcceptAnything, 3, 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.change != nil {
				s.change(t)
			}
			if err := w.reload(ctx, s.force); (err != nil) != s.wantErr {
				t.Fatalf("reload: %v, want error %v", err, s.wantErr)
			}
			if got := w.holder.Current().Default[0].Type; got != s.want {
				t.Errorf("policy default = %s, want %s", got, s.want)
			}
			if got := testutil.ToFloat64(w.errors); got != s.errors {
				t.Errorf("reload errors = %v, want %v", got, s.errors)
			}
			if got := testutil.ToFloat64(w.success); got != s.success {
				t.Errorf("last reload success = %v, want %v", got, s.success)
			}
		})
	}
}

// TestPolicyWatchDefaultPathVanished checks that a watch of the default
// path never takes the accept-all policy of a missing file over a file's.
func TestPolicyWatchDefaultPathVanished(t *testing.T) {
	if _, err := os.Stat(trust.DefaultPolicyPath); err == nil {
		t.Skipf("%s exists", trust.DefaultPolicyPath)
	}
	w, err := newPolicyWatch(trust.DefaultPolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	// As if a file had been there and applied.
	reject := &trust.Policy{Default: []trust.Requirement{{Type: trust.TypeReject}}}
	w.holder.Set(reject)
	w.seen = "sha256:applied"
	if err := w.reload(context.Background(), false); err == nil {
		t.Fatal("reload of a vanished default policy: no error")
	}
	if got := w.holder.Current(); got != reject {
		t.Fatalf("policy = %+v, want the last good one", got)
	}
}
