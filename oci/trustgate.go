package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// Attested is a producer whose artifact's manifest was checked against the trust policy. The check
// came before any payload byte. Verification says how the manifest met the policy, nil when no
// policy was checked.
type Attested interface {
	Verification() *trust.Record
}

// Gate is the trust policy as resolution applies it; it implements resolve.Trust without importing
// resolve. The registry providers check the policy themselves, before a payload byte
// (PullOptions.Policy). The gate keeps what they verified beside the artifact. It checks that again
// when the store already holds the artifact. It keeps sources that carry no signature, weight peers
// and local builds, away from what the policy wants signed.
type Gate struct {
	// Policy is read at each decision: a reload applies to every later one.
	Policy trust.Source
	// Default is the reference a request that names none is checked as: the [resolve] registry
	// repository. "" is the policy's default scope.
	Default string
}

// match is what policy p requires of the artifact a request naming ref
// resolves, and the reference its signatures are checked for ("" the
// record's own).
func (g *Gate) match(p *trust.Policy, ref string) (trust.Match, string, error) {
	if ref == "" {
		ref = g.Default
	}
	if ref == "" {
		return trust.Match{Scope: "default", Requirements: p.Default}, "", nil
	}
	m, err := p.MatchRef(ref)
	return m, ref, err
}

// Unsigned implements resolve.Trust. It is nil when the artifact a request naming ref resolves may
// come without a signature. Otherwise it is the refusal that names the scope. ref is "" for a
// request that names none.
func (g *Gate) Unsigned(ref string) error {
	m, _, err := g.match(g.Policy.Current(), ref)
	if err != nil {
		return err
	}
	if m.Requires() {
		return &trust.Refusal{Scope: m.Scope, Reason: "it accepts only what its requirements check, and this source carries no signature"}
	}
	return nil
}

// SignedSource implements resolve.SourceSignatures: it says whether dir holds a model.sig.
func (g *Gate) SignedSource(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, trust.OMSBundleFile))
	return err == nil
}

// CheckSource implements resolve.SourceSignatures: it checks the model.sig beside src against src's
// digests. The check is under the scope of the request's reference, ref; "" is the default
// reference. The record keeps that reference without its digest, and is kept before the build.
func (g *Gate) CheckSource(ctx context.Context, d *store.Domain, id artifact.ID, ref string, src *artifact.SourceDir) error {
	m, name, err := g.match(g.Policy.Current(), ref)
	if err != nil {
		return err
	}
	if name != "" {
		named, err := reference.ParseNamed(name)
		if err != nil {
			return fmt.Errorf("reference %q: %v: %w", name, err, errdefs.ErrInvalidArgument)
		}
		name = reference.TrimNamed(named).String()
		if t, ok := named.(reference.Tagged); ok {
			name += ":" + t.Tag()
		}
	}
	sig, err := trust.ReadDirSignature(m, name, src.Root)
	if err != nil || sig == nil {
		return err
	}
	files := make([]artifact.FileEntry, len(src.Files))
	for i, f := range src.Files {
		files[i] = artifact.FileEntry{File: artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}}
	}
	_, rec, err := sig.Check(files)
	if err != nil {
		return err
	}
	return trust.Keep(ctx, d, id, rec)
}

// Hit implements resolve.Trust: nil when the store's artifact id may serve a request naming ref. It
// may when the scope requires nothing, or a recorded verification meets the policy as it stands.
// The recorded signatures are checked again, offline; the bytes are not. Otherwise Hit returns the
// refusal.
func (g *Gate) Hit(ctx context.Context, d *store.Domain, id artifact.ID, ref string) error {
	m, repo, err := g.match(g.Policy.Current(), ref)
	if err != nil || !m.Requires() {
		return err
	}
	raw, err := d.Records(id)
	if err != nil {
		return &trust.Refusal{Scope: m.Scope, Reason: "the store's verification record: " + err.Error()}
	}
	if raw == nil {
		return &trust.Refusal{Scope: m.Scope, Reason: "the store holds it unverified (no signature recorded)"}
	}
	recs, err := trust.DecodeRecords(raw)
	if err != nil {
		return &trust.Refusal{Scope: m.Scope, Reason: "the store's verification record: " + err.Error()}
	}
	var why []string
	var idx *artifact.Index // for an OMS record: the digests the store computed
	for _, r := range recs {
		if r.Kind == trust.KindOMS && idx == nil {
			l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
			if err != nil {
				why = append(why, "model.sig: the artifact's index: "+err.Error())
				continue
			}
			idx = l.Index
			l.Close()
		}
		if _, err := r.Check(m, repo, idx, time.Now().UTC()); err != nil {
			var rf *trust.Refusal
			if errors.As(err, &rf) {
				err = errors.New(rf.Reason)
			}
			why = append(why, r.Name()+": "+err.Error())
			continue
		}
		return nil
	}
	return &trust.Refusal{Scope: m.Scope, Reason: "no recorded signature meets it now: " + strings.Join(why, "; ")}
}

// Admit implements resolve.Trust: it checks prod's records before the artifact id is published. It
// checks what prod carries against what the policy requires of ref, and keeps the records that meet
// it. A registry provider's record (Attested) was verified against its own reference's scope. Admit
// checks it again against the request's scope. A weight peer's records (Carrier) are decoded
// strictly. Each must bind to the identity and files received (CheckBinding), and is verified
// offline. Once one is kept, the peer's fetch checks each file's sha256 (Carrier.CheckSHA256). A
// source that brings no record meeting a policy that wants one is refused, naming the scope.
func (g *Gate) Admit(ctx context.Context, d *store.Domain, id artifact.ID, ref string, prod artifact.Producer) error {
	p := g.Policy.Current()
	m, repo, err := g.match(p, ref)
	if err != nil {
		return err
	}
	var recs []trust.Record
	var why []string
	var idx *artifact.Index // a peer's files, an OMS record is checked against
	switch p := prod.(type) {
	case Attested:
		if r := p.Verification(); r != nil {
			recs = append(recs, *r)
		}
	case Carrier:
		raw, identity, files := p.CarriedRecords()
		if raw == nil {
			break
		}
		idx = receivedIndex(files)
		all, err := trust.DecodeRecords(raw)
		if err != nil {
			why = append(why, "the signature records sent: "+err.Error())
		}
		for _, r := range all {
			if err := CheckBinding(r, identity, files); err != nil {
				why = append(why, r.Name()+": "+err.Error())
				continue
			}
			recs = append(recs, r)
		}
	}
	_, attested := prod.(Attested)
	var kept []trust.Record
	for _, r := range recs {
		cm, crepo := m, repo
		if !m.Requires() {
			if attested { // verified by the provider, under its reference's scope
				kept = append(kept, r)
				continue
			}
			// The request wants nothing: a peer's record is kept only as
			// this node verifies it, under its own reference's scope.
			if r.Kind == trust.KindOMS {
				cm, _ = p.MatchOMS(r.Ref)
			} else if cm, err = p.MatchRef(r.Ref); err != nil {
				continue
			}
			if !cm.Requires() {
				continue
			}
			crepo = ""
		}
		v, err := r.Check(cm, crepo, idx, time.Now().UTC())
		if err != nil {
			var rf *trust.Refusal
			if errors.As(err, &rf) {
				err = errors.New(rf.Reason)
			}
			why = append(why, r.Name()+": "+err.Error())
			continue
		}
		r.Verified = v // how this node verified it, not what a sender said
		kept = append(kept, r)
	}
	if m.Requires() && len(kept) == 0 {
		reason := "this source carries no signature"
		if len(why) > 0 {
			reason = "no signature this source carries meets it: " + strings.Join(why, "; ")
		}
		return &trust.Refusal{Scope: m.Scope, Reason: reason}
	}
	if c, ok := prod.(Carrier); ok && len(kept) > 0 {
		c.CheckSHA256()
	}
	for _, r := range kept {
		if err := KeepRecord(ctx, d, id, r); err != nil {
			return err
		}
	}
	return nil
}

// KeepRecord adds rec to the store's verification records of id (trust.Keep). A record without a
// signature is not kept.
func KeepRecord(ctx context.Context, d *store.Domain, id artifact.ID, rec trust.Record) error {
	return trust.Keep(ctx, d, id, rec)
}

// Records are the store's verification records of id, nil when there are none.
func Records(d *store.Domain, id artifact.ID) ([]trust.Record, error) {
	raw, err := d.Records(id)
	if err != nil || raw == nil {
		return nil, err
	}
	recs, err := trust.DecodeRecords(raw)
	if err != nil {
		return nil, fmt.Errorf("verification record of %s: %w: %w", id.Short(), err, errdefs.ErrDataLoss)
	}
	return recs, nil
}
