package main

import (
	"fmt"
	"time"

	"github.com/containerd/log"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/trust"
)

type importResult struct {
	ID      artifact.ID `json:"digest"`
	Path    string      `json:"path"`
	Built   bool        `json:"built"`
	Bytes   int64       `json:"bytes"`
	Seconds float64     `json:"seconds"`
	// Verified says how the directory's model.sig met the trust policy
	// (absent without one).
	Verified []trust.Verified `json:"verified,omitempty"`
}

func newImportCmd(a *app) *cobra.Command {
	var repo, rev, component string
	var tpSize, tpRank int
	cmd := &cobra.Command{
		Use:   "import DIR --revision REV",
		Short: "Publish a safetensors checkpoint directory as it is; prints the identity digest",
		Long: `Publish a safetensors checkpoint directory as it is; prints the identity digest.

A model.sig beside the files (an OpenSSF model-signing v1.0 bundle) is
checked against the digests the store computes while it copies them,
before anything is published: its statement must name exactly those
files (sha256, or blake3 where it says so), save its ignore_paths. Where
the trust policy ([verify] policy; the scope of --repository when it is a
registry repository host/repo, else the default) requires a signature, the
bundle must also be signed by a key or identity the scope trusts, and a
directory without one is refused before a byte is copied. A verified
signature is recorded beside the artifact: inspect shows it and verify
--signatures checks it again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			start := time.Now()
			if err := artifact.CheckSourceRoot(args[0]); err != nil {
				return err
			}
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			var pr *progress
			lease, res, verified, err := importChecked(ctx, a, d, resolve.ImportRequest{Dir: args[0],
				Repository: repo, Revision: rev, Component: component, TPSize: tpSize, TPRank: tpRank,
				OnTotal:  func(total int64) { pr = newProgress("import", total) },
				Progress: func(n int64) { pr.Add(n) }})
			if pr != nil {
				pr.End(err)
			}
			if err != nil {
				return err
			}
			defer lease.Close()
			out := importResult{ID: lease.ID, Path: lease.Dir, Built: res.Built,
				Bytes: lease.Index.TotalBytes(), Seconds: time.Since(start).Seconds(), Verified: verified}
			log.G(ctx).WithField("built", res.Built).WithField("seconds", out.Seconds).Debug("import done")
			return a.printResult(out, out.ID.String())
		},
	}
	f := cmd.Flags()
	f.StringVar(&rev, "revision", "", "immutable model revision: a 40-hex commit or a digest (required)")
	f.StringVar(&repo, "repository", "", "model repository name, e.g. org/name")
	f.StringVar(&component, "component", "all", "component and ownership boundary")
	f.IntVar(&tpSize, "tp-size", 0, "tensor-parallel size of a pre-sharded checkpoint")
	f.IntVar(&tpRank, "tp-rank", 0, "tensor-parallel rank of a pre-sharded checkpoint")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON")
	cmd.MarkFlagRequired("revision")
	return cmd
}

func newDevCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "dev", Short: "Tools for development and benchmarks"}
	var out, size, dtype string
	var shards int
	var seed uint64
	synthCmd := &cobra.Command{
		Use:   "synth --out DIR --size SIZE --shards N --dtype D",
		Short: "Write a deterministic synthetic checkpoint laid out like a Hugging Face model",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := bytefmt.Parse(size)
			if err != nil {
				return err
			}
			pr := newProgress("synth", n)
			err = synth.Write(cmd.Context(), out, synth.Options{Size: n, Shards: shards, DType: dtype, Seed: seed, Progress: pr.Add})
			pr.End(err)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.out, out)
			return nil
		},
	}
	f := synthCmd.Flags()
	f.StringVar(&out, "out", "", "output directory (required)")
	f.StringVar(&size, "size", "1GiB", "approximate payload size, e.g. 1GiB, 512MiB")
	f.IntVar(&shards, "shards", 4, "number of safetensors shards")
	f.StringVar(&dtype, "dtype", "BF16", "safetensors dtype of every tensor")
	f.Uint64Var(&seed, "seed", 1, "random seed")
	synthCmd.MarkFlagRequired("out")
	cmd.AddCommand(synthCmd, newDevHubCmd(a))
	return cmd
}
