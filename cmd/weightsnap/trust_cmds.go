package main

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/trust"
)

// policySummary is what `weightsnap verify-policy --json` prints.
type policySummary struct {
	File    string              `json:"file"`
	Default string              `json:"default"`
	Scopes  map[string][]string `json:"scopes"`
}

func newVerifyPolicyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify-policy [FILE]",
		Short: "Read a trust policy (containers-policy.json format; default [verify] policy) and say what is wrong with it, by line (exit 2)",
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
			if a.jsonOut {
				return a.printJSON(sum)
			}
			fmt.Fprintf(a.out, "%s: ok: default %s\n", path, sum.Default)
			for _, s := range scopes {
				fmt.Fprintf(a.out, "  docker %q: %s\n", s, sum.Scopes[s][0])
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
