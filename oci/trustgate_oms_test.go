package oci

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/trust"
)

// TestGateOMSRecord: a store's record of a model.sig (kind oms) serves a
// hit whose request falls in the scope it was verified under, its
// statement checked against the store's index; another scope, or a key
// the policy no longer trusts, refuses the hit. Sent by a peer, it binds
// by its statement to the files received and is verified again by the
// receiver under its own policy; stripped, or over other files, it is
// refused and nothing is kept.
func TestGateOMSRecord(t *testing.T) {
	ctx := context.Background()
	key, pub := signKey(t)
	_, otherPub := signKey(t)
	_, src := storetest.CheckpointOf(t, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: 9})
	d, l := imported(t, src)
	var files []artifact.File
	for _, e := range l.Index.Files {
		files = append(files, e.File)
	}
	policy := func(pub []byte) *trust.Policy {
		k := base64.StdEncoding.EncodeToString(pub)
		doc := fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"reg.example/models": [{"type": "sigstoreSigned", "keyData": %q}], "reg.example/other": [{"type": "sigstoreSigned", "keyData": %q}]}}}`, k, k)
		p, err := trust.ParsePolicy("policy.json", []byte(doc), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := policy(pub)
	m, ref := good.MatchOMS("reg.example/models/x")
	sig := trust.Signature{Source: "model.sig", Raw: storetest.OMSBundle(t, key, files)}
	v, err := trust.VerifyOMS(m, sig, l.Index, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := trust.NewOMSRecord(ref, m.Scope, sig, v)
	if err := KeepRecord(ctx, d, l.ID, rec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ref string
		p         *trust.Policy
		refusal   string // "" accepted
	}{
		{"the scope it was verified under", "reg.example/models/y:v1", good, ""},
		{"a scope that wants nothing", "reg.example/free/x:v1", good, ""},
		{"another scope", "reg.example/other/x:v1", good, `verified under scope "reg.example/models"`},
		{"a key the policy no longer trusts", "reg.example/models/x:v1", policy(otherPub), "no signature by a key"},
	} {
		t.Run("hit "+tc.name, func(t *testing.T) {
			err := (&Gate{Policy: tc.p}).Hit(ctx, d, l.ID, tc.ref)
			var rf *trust.Refusal
			if tc.refusal == "" && err != nil || tc.refusal != "" && (!errors.As(err, &rf) || !strings.Contains(err.Error(), tc.refusal)) {
				t.Fatalf("hit: %v, want refusal %q", err, tc.refusal)
			}
		})
	}
	sent, err := trust.EncodeRecords([]trust.Record{rec})
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]artifact.File(nil), files...)
	tampered[0].SHA256 = strings.Repeat("0", 64)
	for _, tc := range []struct {
		name    string
		c       carrier
		ref     string
		refusal string // "" admitted, and the record kept
	}{
		{"model.sig sent", carrier{records: sent, identity: l.Identity(), files: files}, "reg.example/models/x:v1", ""},
		{"model.sig sent, a request that wants none", carrier{records: sent, identity: l.Identity(), files: files}, "reg.example/free/x:v1", ""},
		{"stripped", carrier{records: nil, identity: l.Identity(), files: files}, "reg.example/models/x:v1", "carries no signature"},
		{"files other than the signed ones", carrier{records: sent, identity: l.Identity(), files: tampered}, "reg.example/models/x:v1", "the signature says"},
		{"another scope", carrier{records: sent, identity: l.Identity(), files: files}, "reg.example/other/x:v1", "verified under scope"},
	} {
		t.Run("peer "+tc.name, func(t *testing.T) {
			d2 := storetest.Open(t)
			err := (&Gate{Policy: good}).Admit(ctx, d2, l.ID, tc.ref, &tc.c)
			recs, rerr := Records(d2, l.ID)
			if tc.refusal == "" {
				if err != nil || rerr != nil || len(recs) != 1 || recs[0].Kind != trust.KindOMS || recs[0].Scope != "reg.example/models" || !tc.c.checked {
					t.Fatalf("admit: %v; kept %+v %v; sha256 check asked for: %v", err, recs, rerr, tc.c.checked)
				}
				return
			}
			var rf *trust.Refusal
			if !errors.As(err, &rf) || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("admit: %v, want a refusal saying %q", err, tc.refusal)
			}
			if rerr != nil || recs != nil {
				t.Fatalf("a refused source's records were kept: %+v %v", recs, rerr)
			}
		})
	}
}
