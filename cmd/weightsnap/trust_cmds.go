package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/trust"
)

// policySummary is what `weightsnap verify-policy --json` prints.
type policySummary struct {
	File     string              `json:"file"`
	Default  string              `json:"default"`
	Scopes   map[string][]string `json:"scopes"`
	Warnings []trust.Warning     `json:"warnings,omitempty"`
}

func newVerifyPolicyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify-policy [FILE]",
		Short: "Read a trust policy (containers-policy.json format; default [verify] policy) and say what is wrong with it, by line (exit 2), and which requirements the signatures weightsnap reads meet never, or never by a bundle",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := a.cfg.Verify.Policy
			if len(args) == 1 {
				path = args[0]
			}
			p, err := trust.LoadPolicy(path)
			if err != nil {
				return err
			}
			if p.Unverified {
				return a.printResult(policySummary{File: path, Default: trust.TypeAcceptAnything, Scopes: map[string][]string{}},
					fmt.Sprintf("%s: no policy file: artifacts are accepted unverified", path))
			}
			sum := policySummary{File: path, Default: types(p.Default), Scopes: map[string][]string{}}
			scopes := make([]string, 0, len(p.Docker))
			for s, reqs := range p.Docker {
				scopes = append(scopes, s)
				sum.Scopes[s] = []string{types(reqs)}
			}
			sort.Strings(scopes)
			sum.Warnings = p.Warnings()
			if a.jsonOut {
				return a.printJSON(sum)
			}
			fmt.Fprintf(a.out, "%s: ok: default %s\n", path, sum.Default)
			for _, s := range scopes {
				fmt.Fprintf(a.out, "  docker %q: %s\n", s, sum.Scopes[s][0])
			}
			for _, w := range sum.Warnings {
				fmt.Fprintf(a.out, "warning: %s\n", w)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

// types is a requirement list as its types, with the keys each names.
func types(reqs []trust.Requirement) string {
	out := ""
	for i, r := range reqs {
		if i > 0 {
			out += " + "
		}
		out += r.Type
		switch {
		case r.Fulcio != nil:
			out += fmt.Sprintf(" (fulcio %s %s)", r.Fulcio.OIDCIssuer, r.Fulcio.SubjectEmail)
		case len(r.Keys) > 0:
			out += fmt.Sprintf(" (%d key(s))", len(r.Keys))
		}
	}
	return out
}

func newVerifySignatureCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var policy string
	cmd := &cobra.Command{
		Use:   "verify-signature REF",
		Short: "Check a registry artifact's signatures (cosign v3 bundles among its referrers) against the trust policy; prints how each requirement was met, or why it is refused (exit 6)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if policy == "" {
				policy = a.cfg.Verify.Policy
			}
			p, err := trust.LoadPolicy(policy)
			if err != nil {
				return err
			}
			r, err := a.openRemote(ctx, &rf, args[0], 1)
			if err != nil {
				return err
			}
			desc, _, err := r.FetchManifest(ctx)
			if err != nil {
				return err
			}
			got, err := oci.VerifyManifest(ctx, p, r, desc, time.Now().UTC())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(got)
			}
			for _, v := range got {
				how := v.Key
				if v.Identity != "" {
					how = v.Identity
				}
				if p.Unverified {
					how = "unverified: no policy file"
				}
				fmt.Fprintf(a.out, "%s@%s: scope %q: %s %s %s\n", r.Name(), desc.Digest, v.Scope, v.Type, how, v.Signature)
			}
			return nil
		},
	}
	f := cmd.Flags()
	rf.register(f)
	f.StringVar(&policy, "policy", "", "trust policy file; default [verify] policy")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}
