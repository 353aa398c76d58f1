package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/resolve"
)

// publishFlags are weightsnap publish's flags.
type publishFlags struct {
	kind, forRef                   string
	engine, engineVersion, gpuArch string
	tp, pp                         int
	keys                           []string
	dryRun, daemon                 bool
}

func newPublishCmd(a *app) *cobra.Command {
	var f publishFlags
	cmd := &cobra.Command{
		Use:   "publish [DIR] --kind compile-cache --for ARTIFACT --engine NAME --engine-version V --gpu-arch ARCH [--tp N] [--pp N] [--key K=V]...",
		Short: "Publish a directory an engine wrote at its first start (a compile cache) as an artifact a later start finds by its keys",
		Long: `Publish DIR, the cache an engine wrote at its first start (TorchInductor,
Triton, DeepGEMM, FlashInfer, ...), as a compile-cache artifact. Its identity
is made of what makes the cache valid, not of its files: the weight artifact
it was compiled for (--for, which the store must hold: the cache is bound to
its model), the engine and its version, the GPU architecture, the TP and PP
sizes, and the --key K=V pairs. A later start computes the same identity
from the same flags with --dry-run (no DIR) and fetches it like weights
(weightsnap peer fetch, pull, prefetch, mount):

  weightsnap publish /root/.cache/vllm --kind compile-cache --for 7a1b70 \
      --engine vllm --engine-version 0.11.0 --gpu-arch sm_90 --tp 2
  ID=$(weightsnap publish --dry-run --kind compile-cache --for 7a1b70 \
      --engine vllm --engine-version 0.11.0 --gpu-arch sm_90 --tp 2)
  weightsnap mount --writable $ID /root/.cache/vllm

It is the runtime's post-load publication: its own report, and it never
touches DIR or what runs from it; a failure exits non-zero and changes
nothing else. An explicit publish is the user's own ask, so it runs whatever
[resolve] allow_post_load_publish says; with --daemon weightsnapd publishes
(it reads DIR), as its control socket lets a started engine do, and only when
allow_post_load_publish is on. The files are stored as they are, hidden
ones included (a view's .weightsnap/ left out); links and special files are
refused.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return fmt.Errorf("publish takes one directory: %w", errdefs.ErrInvalidArgument)
			case len(args) == 0 && !f.dryRun:
				return fmt.Errorf("publish needs the directory to publish (or --dry-run for the identity alone): %w", errdefs.ErrInvalidArgument)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			req, err := f.request(args)
			if err != nil {
				return err
			}
			var rt *resolve.Runtime
			if !f.daemon {
				cfg := a.cfg
				cfg.Root = a.effectiveRoot()
				cfg.Resolve.AllowPostLoadPublish = true // the user asked for this publication
				if rt, err = noderuntime.NewRuntime(ctx, cfg, noderuntime.RuntimeOptions{Mode: resolve.Required, Remote: cfg.Resolve.RegistryOptions("weightsnap")}); err != nil {
					return err
				}
			}
			d, err := a.existingDomain(ctx)
			if err != nil {
				return err
			}
			if req.For, err = d.ExpandID(f.forRef); err != nil {
				return fmt.Errorf("--for %s: %w", f.forRef, err)
			}
			var res *control.PublishResult
			if f.daemon {
				c, cerr := a.control()
				if cerr != nil {
					return cerr
				}
				res, err = c.Publish(ctx, req)
			} else {
				res, err = noderuntime.PublishCache(ctx, rt, req)
			}
			if err != nil {
				if res != nil && a.jsonOut {
					a.printJSON(res) // the failed publication's report
				}
				return fmt.Errorf("publish: %w", err)
			}
			text := res.ID.String()
			if !req.DryRun {
				text = fmt.Sprintf("%s: compile cache of %s for %s %s (%s, tp %d, pp %d), from %s", res.ID, req.For.Short(), req.Engine, req.EngineVersion, req.GPUArch, req.TPSize, req.PPSize, req.Dir)
			}
			return a.printResult(res, text)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "", `what DIR is: "compile-cache"`)
	fl.StringVar(&f.forRef, "for", "", "the weight artifact the cache was compiled for (digest or unique prefix, in the store)")
	fl.StringVar(&f.engine, "engine", "", "the engine that wrote the cache, e.g. vllm")
	fl.StringVar(&f.engineVersion, "engine-version", "", "its version, e.g. 0.11.0")
	fl.StringVar(&f.gpuArch, "gpu-arch", "", "the GPU architecture compiled for, e.g. sm_90 or gfx942; none for the CPU")
	fl.IntVar(&f.tp, "tp", 1, "tensor-parallel size the engine ran with")
	fl.IntVar(&f.pp, "pp", 1, "pipeline-parallel size the engine ran with")
	fl.StringArrayVar(&f.keys, "key", nil, "an extra key K=V of the cache's identity (a compile flag, a CUDA version); repeatable")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the identity's ID only (what a later start fetches); DIR is not needed")
	fl.BoolVar(&f.daemon, "daemon", false, "publish through weightsnapd's control socket (needs [resolve] allow_post_load_publish)")
	fl.BoolVar(&a.jsonOut, "json", false, "print JSON: id, identity, present, and the publication's report")
	return cmd
}

// request checks the flags and makes the request; For is left for the
// store to expand.
func (f *publishFlags) request(args []string) (control.PublishRequest, error) {
	bad := func(format string, args ...any) (control.PublishRequest, error) {
		return control.PublishRequest{}, fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case f.kind == "":
		return bad("--kind is missing: publish takes --kind %s", control.KindCompileCache)
	case f.kind != control.KindCompileCache:
		return bad("--kind %q: want %s", f.kind, control.KindCompileCache)
	case f.forRef == "":
		return bad("--for is missing: the weight artifact the cache was compiled for")
	case f.engine == "":
		return bad("--engine is missing: the engine that wrote the cache")
	case f.engineVersion == "":
		return bad("--engine-version is missing: the version of %s", f.engine)
	case f.gpuArch == "":
		return bad("--gpu-arch is missing: the GPU architecture compiled for (none for the CPU)")
	case f.tp < 1 || f.pp < 1:
		return bad("--tp and --pp must be at least 1")
	}
	req := control.PublishRequest{Kind: f.kind, Engine: f.engine, EngineVersion: f.engineVersion, GPUArch: f.gpuArch,
		TPSize: f.tp, PPSize: f.pp, DryRun: f.dryRun}
	for _, kv := range f.keys {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return bad("--key %q: want K=V", kv)
		}
		if err := artifact.CheckCacheKey(k, v); err != nil {
			return bad("--key %q: %v", kv, err)
		}
		if _, dup := req.Keys[k]; dup {
			return bad("--key %s is given twice", k)
		}
		if req.Keys == nil {
			req.Keys = map[string]string{}
		}
		req.Keys[k] = v
	}
	if len(args) == 1 {
		dir, err := filepath.Abs(args[0])
		if err != nil {
			return control.PublishRequest{}, err
		}
		req.Dir = dir
	}
	return req, nil
}
