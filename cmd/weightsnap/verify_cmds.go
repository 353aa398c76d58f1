package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/store"
)

func newVerifyCmd(a *app) *cobra.Command {
	var full, all, records bool
	var rate string
	cmd := &cobra.Command{
		Use:   "verify ID | --all",
		Short: "Validate an artifact (or scrub them all); an invalid one is denied and exits 4",
		Long: `Validate an artifact: its metadata, or with --full the BLAKE3 of every payload byte.

--all scrubs every ready artifact: it recomputes every digest the store
records (the BLAKE3 of every byte and every file's sha256) at most --rate
bytes per second, and denies each artifact whose recorded digests disagree
with its bytes; then it checks the recorded signatures of each.

--signatures checks only the signatures the store recorded when the
artifact was verified (weightsnap inspect shows them) against the current
trust policy ([verify] policy), offline, reading no payload byte: of one
artifact, or with --all of every one. A record the policy no longer
accepts fails (exit 6); the artifact's next use by a reference of that
scope is checked again with the registry.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.existingDomain(cmd.Context())
			if err != nil {
				return err
			}
			if all {
				ids, err := readyIDs(cmd.Context(), d)
				if err != nil {
					return err
				}
				if records {
					return verifyRecords(cmd.Context(), a, d, ids)
				}
				n, err := bytefmt.Parse(rate)
				if err != nil {
					return err
				}
				return errors.Join(scrubAll(cmd.Context(), a, d, n), verifyRecords(cmd.Context(), a, d, ids))
			}
			id, err := d.ExpandID(args[0])
			if err != nil {
				return err
			}
			if records {
				return verifyRecords(cmd.Context(), a, d, []artifact.ID{id})
			}
			mode := store.ManifestAndMetadata
			if full {
				mode = store.FullChecksum
			}
			l, err := d.Lookup(cmd.Context(), id, mode)
			if err != nil {
				var de *store.DeniedError
				if errors.As(err, &de) {
					return fmt.Errorf("%w (already denied)", err)
				}
				return err
			}
			defer l.Close()
			fmt.Fprintf(a.out, "%s: valid (%s, %d files, %s)\n", id.Short(), mode, len(l.Index.Files), bytefmt.IEC(l.Index.TotalBytes()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "check every payload byte (full_checksum)")
	cmd.Flags().BoolVar(&all, "all", false, "scrub every ready artifact: every digest recomputed, throttled")
	cmd.Flags().BoolVar(&records, "signatures", false, "check only the recorded signatures against the current trust policy, offline")
	cmd.Flags().StringVar(&rate, "rate", "256MiB", "with --all, the most bytes per second read (0: unthrottled)")
	return cmd
}

// scrubAll scrubs every ready artifact and fails with the findings.
func scrubAll(ctx context.Context, a *app, d *store.Domain, rate int64) error {
	list, err := d.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, info := range list {
		if info.State != store.StateReady {
			continue
		}
		if err := d.Scrub(ctx, info.ID, store.ScrubOptions{Rate: rate}); err != nil {
			errs = append(errs, err)
			fmt.Fprintf(a.out, "%s: %v\n", info.ID.Short(), err)
			continue
		}
		fmt.Fprintf(a.out, "%s: valid (every digest, %s)\n", info.ID.Short(), bytefmt.IEC(info.TotalBytes))
	}
	return errors.Join(errs...)
}
