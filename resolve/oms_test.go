package resolve_test

import (
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// TestResolveSourceSignature: a local passthrough build (a staged hub
// snapshot's, or any source directory's) checks the model.sig beside the
// source under the request's scope before the producer runs: signed by
// the policy's key over exactly the files, it builds under a scope that
// requires a signature and its record is kept; without one the producer
// is skipped; by another key, or leaving a file unsigned, it is refused
// as a policy failure and nothing is published; under a scope that wants
// none, a model.sig that does not name the files still refuses the build.
func TestResolveSourceSignature(t *testing.T) {
	ctx := context.Background()
	key, pub := storetest.SigningKey(t)
	other, _ := storetest.SigningKey(t)
	doc := `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"reg.example/signed": [{"type": "sigstoreSigned", "keyData": "` + base64.StdEncoding.EncodeToString(pub) + `"}]}}}`
	pol, err := trust.ParsePolicy("policy.json", []byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	source := func(t *testing.T, signer crypto.Signer, extra bool) string {
		dir := storetest.Synth(t, synth.Options{Size: 256 << 10, Shards: 1, DType: "BF16", Seed: 11})
		if signer != nil {
			var files []artifact.File
			for _, f := range mustScan(t, dir).Files {
				files = append(files, artifact.File{Path: f.Path, SHA256: f.SHA256})
			}
			if err := os.WriteFile(filepath.Join(dir, trust.OMSBundleFile), storetest.OMSBundle(t, signer, files), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if extra {
			if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("added after signing"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		storetest.Settle(t, dir)
		return dir
	}
	for _, tc := range []struct {
		name, ref string
		signer    crypto.Signer
		extra     bool
		want      resolve.Kind // "" built
		detail    string
	}{
		{"signed by the key", "reg.example/signed/m:v1", key, false, "", ""},
		{"no model.sig", "reg.example/signed/m:v1", nil, false, resolve.KindMiss, "carries no signature"},
		{"signed by another key", "reg.example/signed/m:v1", other, false, resolve.KindPolicy, "no signature by a key"},
		{"an unsigned file", "reg.example/signed/m:v1", key, true, resolve.KindPolicy, "unsigned files: notes.txt"},
		{"a scope that wants none, an unsigned file", "reg.example/free/m:v1", key, true, resolve.KindProducer, "unsigned files: notes.txt"},
		{"a scope that wants none, signed", "reg.example/free/m:v1", key, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := source(t, tc.signer, tc.extra)
			root := filepath.Join(t.TempDir(), "root")
			rt := newRuntime(t, resolve.Config{Root: root, Mode: resolve.Required, AllowLocalBuild: true, Trust: &oci.Gate{Policy: pol}})
			res, err := rt.Resolve(ctx, resolve.Request{Source: dir, Target: target, Local: producers.Passthrough{}, Artifact: tc.ref})
			//lint:ignore SA5001 Resolve returns a Resolution to close with every error
			defer res.Close()
			d, derr := store.OpenExisting(ctx, root, nil)
			if derr != nil {
				t.Fatal(derr)
			}
			if tc.want == "" {
				if err != nil || res.Report.Outcome != resolve.OutcomeBuilt {
					t.Fatalf("resolve: %v %+v", err, res.Report)
				}
				recs, err := oci.Records(d, res.Lease.ID)
				signed := strings.HasPrefix(tc.ref, "reg.example/signed/")
				if err != nil || signed != (len(recs) == 1) || signed && (recs[0].Kind != trust.KindOMS || recs[0].Scope != "reg.example/signed" || recs[0].Ref != tc.ref) {
					t.Fatalf("records %+v %v", recs, err)
				}
				return
			}
			var f *resolve.Failure
			if !errors.As(err, &f) || f.Kind != tc.want || !strings.Contains(fmt.Sprintf("%v %+v", err, res.Report.Steps), tc.detail) {
				t.Fatalf("resolve: %v (%+v), want a %s failure saying %q", err, res.Report.Steps, tc.want, tc.detail)
			}
			if list, _ := d.List(ctx); len(list) != 0 {
				t.Fatalf("a refused source was published: %+v", list)
			}
		})
	}
}
