package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// verification is how an artifact was verified, as inspect shows it
// (JSON key "verification"): "verified" with the records the store keeps
// beside it, or "unverified" when it keeps none (imported, built, pulled
// without a policy file, or from a scope that wants no signature).
type verification struct {
	Status  string               `json:"status"`
	Records []verificationRecord `json:"records,omitempty"`
}

// verificationRecord is one recorded verification, without the bundles:
// of an OCI manifest's signatures (kind absent), or of a model.sig over
// the files (kind "oms": scope set, no manifest, the bundle's digest).
type verificationRecord struct {
	Kind       string           `json:"kind,omitempty"`
	Ref        string           `json:"ref"`
	Scope      string           `json:"scope,omitempty"`
	Manifest   string           `json:"manifest,omitempty"`
	Bundle     string           `json:"bundle,omitempty"`
	Signatures []string         `json:"signatures"`
	Verified   []trust.Verified `json:"verified"`
}

// Statuses of a verification.
const (
	statusVerified   = "verified"
	statusUnverified = "unverified"
)

func verificationOf(d *store.Domain, id artifact.ID) (verification, error) {
	recs, err := oci.Records(d, id)
	if err != nil {
		return verification{}, err
	}
	v := verification{Status: statusUnverified}
	for _, r := range recs {
		vr := verificationRecord{Kind: r.Kind, Ref: r.Ref, Scope: r.Scope, Signatures: []string{}, Verified: r.Verified}
		if r.Kind == trust.KindOMS {
			vr.Bundle = r.Digest().String()
		} else {
			vr.Manifest = r.Digest().String()
		}
		for _, s := range r.Signatures {
			vr.Signatures = append(vr.Signatures, s.Source)
		}
		if r.Signed() {
			v.Status = statusVerified
		}
		v.Records = append(v.Records, vr)
	}
	return v, nil
}

// printVerification is inspect's text of a verification.
func printVerification(a *app, v verification) {
	fmt.Fprintf(a.out, "Verified:  %s\n", v.Status)
	for _, r := range v.Records {
		if r.Kind == trust.KindOMS {
			ref := r.Ref
			if ref == "" {
				ref = "no repository"
			}
			fmt.Fprintf(a.out, "  %s over the files (%s), bundle %s\n", trust.OMSBundleFile, ref, r.Bundle)
		} else {
			fmt.Fprintf(a.out, "  %s\n", r.Ref)
		}
		for _, m := range r.Verified {
			how := m.Type
			switch {
			case m.Identity != "":
				how += " by " + m.Identity
			case m.Key != "":
				how += " by key " + m.Key
			}
			if m.Signature != "" {
				how += ", signature " + m.Signature.String()
			}
			fmt.Fprintf(a.out, "    scope %q: %s, at %s\n", m.Scope, how, m.Time.UTC().Format(time.RFC3339))
		}
	}
}

// signaturesResult is what verify found of an artifact's recorded
// signatures under the current trust policy.
type signaturesResult struct {
	// Status is valid (the policy accepts every record), unverified (none
	// recorded) or invalid (it refuses one, or the records cannot be read).
	Status string `json:"status"`
	// Policy is the trust policy's file, or "no policy file".
	Policy  string          `json:"policy"`
	Valid   []string        `json:"valid"`   // the records the policy accepts
	Invalid []recordFinding `json:"invalid"` // those it refuses, with why

	errs []error
}

// recordFinding is a record the policy refuses (its name; empty when the
// records could not be read) and why.
type recordFinding struct {
	Record string `json:"record"`
	Error  string `json:"error"`
}

// Statuses of a signaturesResult.
const (
	signaturesValid      = "valid"
	signaturesUnverified = "unverified"
	signaturesInvalid    = "invalid"
)

// err is the failure of an invalid result, each error naming id's record.
func (s *signaturesResult) err(id artifact.ID) error {
	return fmt.Errorf("%s: signatures: %w", id.Short(), errors.Join(s.errs...))
}

// checkRecords checks the trust records of id again, against pol: each
// record under the scope of the reference it was read from (a model.sig
// under its repository's or the default scope, its statement against the
// store's index of the files); the signatures only, never the bytes. An
// artifact without a record is unverified, not a failure.
func checkRecords(ctx context.Context, pol *trust.Policy, d *store.Domain, id artifact.ID) *signaturesResult {
	s := &signaturesResult{Status: signaturesValid, Policy: policyName(pol), Valid: []string{}, Invalid: []recordFinding{}}
	recs, err := oci.Records(d, id)
	if err != nil {
		s.Status, s.errs = signaturesInvalid, []error{err}
		s.Invalid = append(s.Invalid, recordFinding{Error: err.Error()})
		return s
	}
	if len(recs) == 0 {
		s.Status = signaturesUnverified
		return s
	}
	for _, r := range recs {
		name := r.Name()
		if err := checkRecord(ctx, pol, d, id, r); err != nil {
			s.Status = signaturesInvalid
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.Invalid = append(s.Invalid, recordFinding{Record: name, Error: err.Error()})
			continue
		}
		s.Valid = append(s.Valid, name)
	}
	return s
}

// printSignatures is verify's text of s: a line for each record refused,
// and one for those accepted.
func printSignatures(a *app, id artifact.ID, s *signaturesResult) {
	if s.Status == signaturesUnverified {
		fmt.Fprintf(a.out, "%s: signatures: unverified (none recorded)\n", id.Short())
		return
	}
	for _, f := range s.Invalid {
		if f.Record == "" {
			fmt.Fprintf(a.out, "%s: %s\n", id.Short(), f.Error)
			continue
		}
		fmt.Fprintf(a.out, "%s: signatures of %s: %s\n", id.Short(), f.Record, f.Error)
	}
	if len(s.Valid) > 0 {
		fmt.Fprintf(a.out, "%s: signatures: valid under %s (%s)\n", id.Short(), s.Policy, strings.Join(s.Valid, ", "))
	}
}

// checkRecord checks one record of id again under pol: a manifest's
// signatures under its reference's scope, a model.sig under its
// repository's (or the default) scope against the store's index of id.
func checkRecord(ctx context.Context, pol *trust.Policy, d *store.Domain, id artifact.ID, r trust.Record) error {
	if r.Kind != trust.KindOMS {
		m, err := pol.MatchRef(r.Ref)
		if err == nil {
			_, err = r.Check(m, "", nil, time.Now().UTC())
		}
		return err
	}
	m, _ := pol.MatchOMS(r.Ref)
	l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
	if err != nil {
		return err
	}
	defer l.Close()
	_, err = r.Check(m, "", l.Index, time.Now().UTC())
	return err
}

func policyName(p *trust.Policy) string {
	if p.Unverified {
		return "no policy file"
	}
	return p.File
}

// readyIDs are the store's ready artifacts.
func readyIDs(ctx context.Context, d *store.Domain) ([]artifact.ID, error) {
	list, err := d.List(ctx)
	if err != nil {
		return nil, err
	}
	ids := []artifact.ID{}
	for _, info := range list {
		if info.State == store.StateReady {
			ids = append(ids, info.ID)
		}
	}
	return ids, nil
}
