package oci

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// Attested is a producer whose artifact's manifest was checked against
// the trust policy before any payload byte: Verification is how (nil
// when no policy was checked).
type Attested interface {
	Verification() *trust.Record
}

// Gate is the trust policy as resolution applies it (it implements
// resolve.Trust without importing resolve). The registry providers check
// the policy themselves, before a payload byte (PullOptions.Policy); the
// gate keeps what they verified beside the artifact, re-checks it when
// the store already holds the artifact, and keeps sources that carry no
// signature (weight peers, local builds) away from what the policy
// wants signed.
type Gate struct {
	Policy *trust.Policy
	// Default is the reference a request that names none is checked as:
	// the [resolve] registry repository; "" is the policy's default scope.
	Default string
}

// match is what the policy requires of the artifact a request naming ref
// resolves, and the repository signatures must be of ("" any).
func (g *Gate) match(ref string) (trust.Match, string, error) {
	if ref == "" {
		ref = g.Default
	}
	if ref == "" {
		return trust.Match{Scope: "default", Requirements: g.Policy.Default}, "", nil
	}
	m, err := g.Policy.MatchRef(ref)
	name, _, _ := strings.Cut(ref, "@")
	return m, name, err
}

// Unsigned implements resolve.Trust: nil when the artifact a request
// naming ref ("" none) resolves may come without a signature, else the
// refusal that names the scope.
func (g *Gate) Unsigned(ref string) error {
	m, _, err := g.match(ref)
	if err != nil {
		return err
	}
	if m.Requires() {
		return &trust.Refusal{Scope: m.Scope, Reason: "it accepts only what its requirements check, and this source carries no signature"}
	}
	return nil
}

// Hit implements resolve.Trust: nil when the store's artifact id may
// serve a request naming ref, the scope requiring nothing or a recorded
// verification meeting the policy now (the signatures checked again,
// offline, never the bytes); else the refusal.
func (g *Gate) Hit(ctx context.Context, d *store.Domain, id artifact.ID, ref string) error {
	m, repo, err := g.match(ref)
	if err != nil || !m.Requires() {
		return err
	}
	raw, err := d.Signatures(id)
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
	for _, r := range recs {
		if _, err := r.Check(m, repo, time.Now().UTC()); err != nil {
			var rf *trust.Refusal
			if errors.As(err, &rf) {
				err = errors.New(rf.Reason)
			}
			why = append(why, r.Ref+": "+err.Error())
			continue
		}
		return nil
	}
	return &trust.Refusal{Scope: m.Scope, Reason: "no recorded signature meets it now: " + strings.Join(why, "; ")}
}

// Keep implements resolve.Trust: it records, before publication, how the
// manifest of what prod fetches met the policy.
func (g *Gate) Keep(ctx context.Context, d *store.Domain, id artifact.ID, prod artifact.Producer) error {
	a, ok := prod.(Attested)
	if !ok || a.Verification() == nil {
		return nil
	}
	return KeepRecord(ctx, d, id, *a.Verification())
}

// KeepRecord adds rec to the store's verification records of id.
func KeepRecord(ctx context.Context, d *store.Domain, id artifact.ID, rec trust.Record) error {
	err := d.EditSignatures(ctx, id, func(old []byte) ([]byte, error) {
		var recs []trust.Record
		if old != nil {
			var err error
			if recs, err = trust.DecodeRecords(old); err != nil {
				log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("trust: a corrupt verification record is replaced")
				recs = nil
			}
		}
		return trust.EncodeRecords(trust.MergeRecord(recs, rec))
	})
	if err != nil {
		return fmt.Errorf("record the verification of %s: %w", id.Short(), err)
	}
	return nil
}

// Records are the store's verification records of id (none: nil).
func Records(d *store.Domain, id artifact.ID) ([]trust.Record, error) {
	raw, err := d.Signatures(id)
	if err != nil || raw == nil {
		return nil, err
	}
	recs, err := trust.DecodeRecords(raw)
	if err != nil {
		return nil, fmt.Errorf("verification record of %s: %w: %w", id.Short(), err, errdefs.ErrDataLoss)
	}
	return recs, nil
}
