package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/staging"
)

// resolveOpts are the flags of weightsnap resolve.
type resolveOpts struct {
	identity, from, revision, repository, component string
	tpSize, tpRank                                  int
	layoutSpec, dtype, mode, report, validation     string
	layout                                          string
	maxPartSize                                     int64
	allowLocalBuild, noFingerprintCache             bool
	timeout                                         int
	registry                                        string
	remote                                          remoteFlags
	peers                                           []string
	peer                                            peerFlags
}

func newResolveCmd(a *app) *cobra.Command {
	var o resolveOpts
	cmd := &cobra.Command{
		Use:   "resolve (--identity FILE | --from DIR) [--revision REV] [--tp-size N --tp-rank R (--layout-spec FILE | --layout vllm-sharded)] [--dtype D] [--mode M] [--report FILE|-]",
		Short: "Resolve an exact artifact: print its directory, or the canonical source directory on a fallback",
		Long: `Resolve an artifact identity: the validated local artifact, then the weight
peers (--peer ADDR, or [peer] peers), then the registry
(--registry REPO: the artifact weightsnap push filed under its identity tag), then a
local producer (passthrough, tp-split with --tp-size/--tp-rank/--layout-spec, cast
with --dtype), then, in preferred mode, the canonical source directory (--from).

tp-split writes our per-rank layout by a layout spec, or with --layout vllm-sharded
vLLM's sharded-state layout (model-rank-R-part-P.safetensors, vLLM's parameter
names, parts of at most --max-part-size bytes, 5 GiB by default) that vLLM's
load_format=sharded_state reads; its rules are vLLM's, so it takes no spec, and only
LlamaForCausalLM checkpoints are mapped (others are refused as unsupported).

The identity is read from --identity FILE, or derived from --from DIR and
--revision with the producer the other flags name. On success stdout holds the
artifact directory (or the canonical source directory after a fallback). The
terminal JSON report goes to --report FILE, or with --report - to stdout after
the path. In disabled mode nothing under the store root is touched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runResolve(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.identity, "identity", "", "identity document (JSON) to resolve")
	f.StringVar(&o.from, "from", "", "canonical source directory: a safetensors checkpoint or Hugging Face snapshot")
	f.StringVar(&o.revision, "revision", "", "immutable model revision (a 40-hex commit or a digest), to derive the identity from --from")
	f.StringVar(&o.repository, "repository", "", "model repository name, e.g. org/name")
	f.StringVar(&o.component, "component", "all", "component and ownership boundary")
	f.IntVar(&o.tpSize, "tp-size", 0, "tensor-parallel size: split with the tp-split producer")
	f.IntVar(&o.tpRank, "tp-rank", 0, "tensor-parallel rank")
	f.StringVar(&o.layoutSpec, "layout-spec", "", "tp-split layout spec (TOML)")
	f.StringVar(&o.layout, "layout", "", "tp-split output layout: weightsnap (by --layout-spec, the default) or vllm-sharded")
	f.Int64Var(&o.maxPartSize, "max-part-size", 0, "vllm-sharded: most bytes of tensors in one part file (default 5 GiB)")
	f.StringVar(&o.dtype, "dtype", "", "cast F32/F16/BF16 tensors to F32, F16 or BF16")
	f.StringVar(&o.mode, "mode", string(resolve.Preferred), "resolution mode: disabled, preferred or required")
	f.StringVar(&o.report, "report", "", "write the JSON report to FILE, or to stdout with -")
	f.StringVar(&o.validation, "validation", "", "lookup validation: manifest_and_metadata or full_checksum (default: the domain's policy)")
	f.BoolVar(&o.allowLocalBuild, "allow-local-build", true, "let local producers build a missing artifact")
	f.BoolVar(&o.noFingerprintCache, "no-fingerprint-cache", false, "hash every source file instead of using the store's fingerprint cache")
	f.StringVar(&o.registry, "registry", "", "registry repository (host/repo) to fetch the exact artifact from before building locally")
	f.StringSliceVar(&o.peers, "peer", nil, "weight peers to fetch the exact artifact from before the registry (default: [peer] peers)")
	o.peer.register(f)
	o.remote.register(f)
	f.IntVar(&o.timeout, "coordination-timeout", 0, "seconds to wait for each lock (default: the configured store policy's)")
	return cmd
}

// config is the configuration file with the command line's flags over it.
func (o resolveOpts) config(cmd *cobra.Command, a *app) config.Config {
	c := a.cfg
	c.Root = a.effectiveRoot()
	set := cmd.Flags().Changed
	if set("mode") {
		c.Resolve.Mode = o.mode
	}
	if set("validation") {
		c.Resolve.Validation = o.validation
	}
	if set("registry") {
		c.Resolve.Registry = o.registry
	}
	if set("allow-local-build") {
		c.Resolve.AllowLocalBuild = o.allowLocalBuild
	}
	if set("coordination-timeout") {
		c.Resolve.CoordinationTimeoutSeconds = o.timeout
	}
	c.Peer = o.peer.apply(cmd, c.Peer)
	if len(o.peers) > 0 {
		c.Peer.Peers = o.peers
	}
	return c
}

func (a *app) runResolve(cmd *cobra.Command, o resolveOpts) error {
	ctx := cmd.Context()
	cfg := o.config(cmd, a)
	mode, err := resolve.ParseMode(cfg.Resolve.Mode)
	if err != nil {
		return err
	}
	if o.identity == "" && o.from == "" {
		return fmt.Errorf("resolve: give --identity FILE or --from DIR: %w", errdefs.ErrInvalidArgument)
	}
	req := resolve.Request{Source: o.from,
		Target: producers.Target{Repository: o.repository, Revision: o.revision, Component: o.component}}
	// Disabled mode reads no identity, spec or store: the source, directly.
	if mode != resolve.Disabled {
		if o.identity != "" {
			raw, err := os.ReadFile(o.identity)
			if err != nil {
				return fmt.Errorf("resolve: %w", err)
			}
			id, err := artifact.ParseIdentity(raw)
			if err != nil {
				return err
			}
			req.Identity = &id
		} else if o.revision == "" {
			return fmt.Errorf("resolve: --from needs --revision to derive the identity: %w", errdefs.ErrInvalidArgument)
		}
		if o.from != "" {
			req.Local, err = producers.Choose(producers.Choice{TPSize: o.tpSize, TPRank: o.tpRank,
				LayoutSpec: o.layoutSpec, DType: o.dtype, Layout: o.layout, MaxPartSize: o.maxPartSize}, req.Identity)
			if err != nil {
				return fmt.Errorf("resolve: %w", err)
			}
		}
	}
	passthrough, err := a.localPassthrough(mode)
	if err != nil {
		return err
	}
	if _, ok := req.Local.(producers.Passthrough); ok {
		req.Local = passthrough
	}
	rt, err := noderuntime.NewRuntime(ctx, cfg, noderuntime.RuntimeOptions{Mode: mode, Remote: o.remote.options(&cfg.Resolve, 0),
		Producers: []producers.Local{passthrough}, NoFingerprintCache: o.noFingerprintCache})
	if err != nil {
		return err
	}
	var shown producerProgress
	req.OnProduce = shown.start
	res, rerr := rt.Resolve(ctx, req)
	shown.stop(rerr)
	defer res.Close()
	if rerr == nil {
		fmt.Fprintln(a.out, res.Path)
	}
	if err := a.writeReport(o.report, res.Report); err != nil {
		return err
	}
	return rerr
}

// localPassthrough is the passthrough producer resolution registers: the
// staged checkpoint's (which reads a staged, verified copy of the source
// when this node has one) once anything was staged here.
func (a *app) localPassthrough(mode resolve.Mode) (producers.Local, error) {
	if mode == resolve.Disabled {
		return producers.Passthrough{}, nil
	}
	e, err := a.stagingEngine(stagingFlags{}, staging.ModeAuto, false)
	if err != nil || e == nil {
		return producers.Passthrough{}, err
	}
	return staging.Producer{Engine: e}, nil
}

func (a *app) writeReport(dest string, rep *resolve.Report) error {
	if dest == "" {
		return nil
	}
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	if dest == "-" {
		_, err = a.out.Write(raw)
		return err
	}
	return os.WriteFile(dest, raw, 0o644)
}

// producerProgress shows the progress of the producer resolution runs
// (a local producer's source bytes read, a fetch's bytes fetched).
type producerProgress struct {
	pr     *progress
	follow func() // stops following; nil when nothing is followed
}

// errNextSource ends the progress of a producer that resolution left for
// the next source.
var errNextSource = errors.New("resolution went on to the next source")

// start follows p, which stands for source; it stops following the one
// before, which resolution left.
func (s *producerProgress) start(source string, p artifact.Producer) {
	s.stop(errNextSource)
	r, ok := p.(artifact.ProgressReporter)
	if !ok {
		return
	}
	_, total := r.Progress()
	s.pr = newProgress(strings.TrimPrefix(source, resolve.SourceProducerPrefix), total)
	var shown int64
	s.follow = artifact.Follow(r, 200*time.Millisecond, func(done, _ int64) {
		s.pr.Add(done - shown)
		shown = done
	})
}

// stop ends the display of the producer followed, if any: done when err
// is nil, else stopped.
func (s *producerProgress) stop(err error) {
	if s.follow == nil {
		return
	}
	s.follow()
	s.pr.End(err)
	s.pr, s.follow = nil, nil
}
