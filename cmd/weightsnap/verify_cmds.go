package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// verifyResult is what verify found of one artifact (one element of
// verify --json's list).
type verifyResult struct {
	Hex string      `json:"id"`
	ID  artifact.ID `json:"digest"`
	// Check is what was checked of the bytes: manifest_and_metadata,
	// full_checksum, or every_digest (a scrub); absent with --signatures.
	Check string `json:"check,omitempty"`
	// Valid says every check passed.
	Valid bool  `json:"valid"`
	Files int   `json:"files,omitempty"`
	Bytes int64 `json:"bytes,omitempty"`
	// Error is why the check of the bytes failed.
	Error      string            `json:"error,omitempty"`
	Signatures *signaturesResult `json:"signatures,omitempty"`
}

// verifyFailures is verify's failure. Each artifact that failed is said
// once, in its own line of the report (or its JSON); the error counts them
// and carries their causes, whose classes give the exit status.
type verifyFailures struct {
	checked int
	first   artifact.ID
	errs    []error
}

func (e *verifyFailures) add(id artifact.ID, err error) {
	if len(e.errs) == 0 {
		e.first = id
	}
	e.errs = append(e.errs, err)
}

func (e *verifyFailures) Error() string {
	if e.checked == 1 {
		return fmt.Sprintf("artifact %s failed verification", e.first.Short())
	}
	return fmt.Sprintf("%d of %d artifacts failed verification", len(e.errs), e.checked)
}

// Unwrap is the causes.
func (e *verifyFailures) Unwrap() []error { return e.errs }

// everyDigest is the check of a scrub: every digest the store records.
const everyDigest = "every_digest"

func newVerifyCmd(a *app) *cobra.Command {
	var full, all, records bool
	var rate string
	cmd := &cobra.Command{
		Use:   "verify ID | --all",
		Short: "Validate an artifact (or scrub them all); an invalid one is denied and exits 4",
		Long: `Validate an artifact: its metadata, or with --full the BLAKE3 of every payload byte.

--all scrubs every ready artifact: it recomputes every digest the store
records (the BLAKE3 of every byte and every file's sha256), reading each
byte once, at most --rate bytes per second, and denies each artifact
whose recorded digests disagree with its bytes; then it checks the
recorded signatures of each.

--signatures checks only the signatures the store recorded when the
artifact was verified (weightsnap inspect shows them) against the current
trust policy ([verify] policy), offline, reading no payload byte: of one
artifact, or with --all of every one. A record the policy no longer
accepts fails (exit 6); the artifact's next use by a reference of that
scope is checked again with the registry.

--json prints a list with one element per artifact checked (an empty
list when the store holds none): digest, check, valid, files, bytes,
error, and signatures (status, policy, the records valid and invalid).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			n, err := bytefmt.Parse(rate)
			if err != nil {
				return fmt.Errorf("--rate: %w", err)
			}
			d, err := a.existingDomain(ctx)
			if err != nil {
				return err
			}
			ids := []artifact.ID{}
			if all {
				if ids, err = readyIDs(ctx, d); err != nil {
					return err
				}
			} else {
				id, err := d.ExpandID(args[0])
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			var pol *trust.Policy
			if records || all {
				if pol, err = a.cfg.Verify.LoadPolicy(); err != nil {
					return err
				}
			}
			results := []verifyResult{}
			failed := &verifyFailures{}
			for _, id := range ids {
				r := verifyResult{Hex: id.Hex(), ID: id, Valid: true}
				var err error
				switch {
				case records:
				case all:
					err = scrub(ctx, d, n, &r)
				default:
					err = lookupChecked(ctx, d, full, &r)
				}
				if err != nil {
					r.Valid, r.Error = false, err.Error()
					failed.add(id, err)
				} else if pol != nil {
					r.Signatures = checkRecords(ctx, pol, d, id)
					if r.Signatures.Status == signaturesInvalid {
						r.Valid = false
						failed.add(id, r.Signatures.err(id))
					}
				}
				if !a.jsonOut {
					printVerifyResult(a, r)
				}
				results = append(results, r)
			}
			if a.jsonOut {
				if err := a.printJSON(results); err != nil {
					return err
				}
			}
			if len(failed.errs) == 0 {
				return nil
			}
			failed.checked = len(ids)
			return failed
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "check every payload byte (full_checksum)")
	cmd.Flags().BoolVar(&all, "all", false, "scrub every ready artifact: every digest recomputed, throttled")
	cmd.Flags().BoolVar(&records, "signatures", false, "check only the recorded signatures against the current trust policy, offline")
	cmd.Flags().StringVar(&rate, "rate", "256MiB", "with --all, the most bytes per second read (0: unthrottled)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: a list, one element per artifact checked")
	return cmd
}

// lookupChecked validates id as a lookup does, in full with full, into r.
func lookupChecked(ctx context.Context, d *store.Domain, full bool, r *verifyResult) error {
	mode := store.ManifestAndMetadata
	if full {
		mode = store.FullChecksum
	}
	r.Check = string(mode)
	l, err := d.Lookup(ctx, r.ID, mode)
	if err != nil {
		var de *store.DeniedError
		if errors.As(err, &de) {
			return fmt.Errorf("%w (already denied)", err)
		}
		return err
	}
	defer l.Close()
	r.Files, r.Bytes = len(l.Index.Files), l.Index.TotalBytes()
	return nil
}

// scrub recomputes every digest the store records of r's artifact, at most
// rate bytes per second, into r.
func scrub(ctx context.Context, d *store.Domain, rate int64, r *verifyResult) error {
	r.Check = everyDigest
	info, err := d.InspectArtifact(ctx, r.ID)
	if err != nil {
		return err
	}
	r.Files, r.Bytes = len(info.Files), info.TotalBytes
	return d.Scrub(ctx, r.ID, store.ScrubOptions{Rate: rate})
}

// printVerifyResult is verify's text of r: a line for its bytes, and one
// for each finding of its signatures.
func printVerifyResult(a *app, r verifyResult) {
	short := r.ID.Short()
	switch {
	case r.Error != "":
		fmt.Fprintf(a.out, "%s: %s\n", short, r.Error)
	case r.Check == everyDigest:
		fmt.Fprintf(a.out, "%s: valid (every digest, %s)\n", short, bytefmt.IEC(r.Bytes))
	case r.Check != "":
		fmt.Fprintf(a.out, "%s: valid (%s, %d files, %s)\n", short, r.Check, r.Files, bytefmt.IEC(r.Bytes))
	}
	if r.Signatures != nil {
		printSignatures(a, r.ID, r.Signatures)
	}
}
