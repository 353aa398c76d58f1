package main

import (
	"bytes"
	"context"
	"crypto/elliptic"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/store"
)

// TestConfigDefault: `weightsnapd config default` prints the whole file,
// which parses back to the defaults.
func TestConfigDefault(t *testing.T) {
	var out bytes.Buffer
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"config", "default"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got, err := config.Parse("printed", out.Bytes())
	want := config.Default()
	want.StoreKeys = store.PolicyKeys() // the printed file sets every key of [store]
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestConfigCheck: `weightsnapd config check` accepts a good file and
// refuses a bad one as invalid input.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"[snapshotter]\nmode = \"preferred\"\n", true},
		{"[snapshotter]\nmode = \"sometimes\"\n", false},
		{"[bogus]\n", false},
	} {
		p := filepath.Join(t.TempDir(), "config.toml")
		os.WriteFile(p, []byte(tc.file), 0o644)
		cmd := newRoot()
		cmd.SetOut(io.Discard)
		cmd.SetArgs([]string{"--config", p, "config", "check"})
		err := cmd.Execute()
		if (err == nil) != tc.ok || (err != nil && !errdefs.IsInvalidArgument(err)) {
			t.Fatalf("%q: %v", tc.file, err)
		}
	}
}

// TestConfigCheckPolicy: `weightsnapd config check` reads [verify] policy,
// names the line of what is wrong with it, and warns of a requirement a
// bundle can never meet.
func TestConfigCheckPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   string // "" for ok
	}{
		{`{"default": [{"type": "insecureAcceptAnything"}]}`, ""},
		{`{"default": [{"type": "reject"}], "transports": {"docker": {"example.com/a:v1": [{"type": "sigstoreSigned", "keyData": "` + base64.StdEncoding.EncodeToString(testPub(t)) + `"}]}}}`,
			"warning: scope \"example.com/a:v1\" (line 1): met only by cosign's legacy signatures naming the tag"},
		{"{\"default\": [{\"type\": \"reject\"}],\n\"transports\": {\"docker\": {\"example.com/a\": [\n  {\"type\": \"sigstoreSigned\", \"keyPath\": \"missing.pub\"}]}}}", "line 3"},
	} {
		dir := t.TempDir()
		pol := filepath.Join(dir, "policy.json")
		os.WriteFile(pol, []byte(tc.policy), 0o644)
		p := filepath.Join(dir, "config.toml")
		os.WriteFile(p, []byte("[verify]\npolicy = \""+pol+"\"\n"), 0o644)
		cmd := newRoot()
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--config", p, "config", "check"})
		err := cmd.Execute()
		if tc.want == "" || strings.HasPrefix(tc.want, "warning") {
			if err != nil || !strings.Contains(out.String(), pol+": ok") || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("%v: %s", err, out.String())
			}
			continue
		}
		if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("want invalid input at %s, got %v", tc.want, err)
		}
	}
}

// testPub is a new ECDSA public key, PEM.
func testPub(t *testing.T) []byte {
	_, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(nil))
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestConfigCheckStore: `weightsnapd config check` says what [store] would
// change in the store at the root and changes nothing; a change that would
// not hold is invalid input.
func TestConfigCheckStore(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	created := store.DefaultPolicy()
	created.MaxStoreBytes, created.HighWatermarkPercent, created.LowWatermarkPercent = 512<<20, 60, 40
	for _, tc := range []struct {
		name, file string
		want       []string
		bad        bool
	}{
		{"no store yet", "", []string{"no store at " + root}, false},
		{"changes", "[store]\nmax_store_bytes = \"1GiB\"\nhigh_watermark_percent = 90\n",
			[]string{"would change: max_store_bytes 512.0 MiB -> 1.0 GiB\n", "would change: high_watermark_percent 60 -> 90\n"}, false},
		{"as it is", "[store]\nmax_store_bytes = \"512MiB\"\n", []string{"holds [store] as it is"}, false},
		{"would not hold", "[store]\nlow_watermark_percent = 70\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "no store yet" {
				if _, err := store.Open(context.Background(), root, &created); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(p, []byte("root = \""+root+"\"\n[verify]\npolicy = \"\"\n"+tc.file), 0o644)
			cmd := newRoot()
			var out strings.Builder
			cmd.SetOut(&out)
			cmd.SetArgs([]string{"--config", p, "config", "check"})
			err := cmd.Execute()
			if tc.bad {
				if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "low_watermark_percent") {
					t.Fatalf("%v, want invalid input naming low_watermark_percent", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if got, err := store.ReadPolicy(root); tc.name != "no store yet" && (err != nil || got != created) {
				t.Errorf("check changed the store's policy to %+v (%v)", got, err)
			}
		})
	}
}
