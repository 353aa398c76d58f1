package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/trust"
)

// newOCICmds returns the registry commands: push, pull and image.
func newOCICmds(a *app) []*cobra.Command {
	return []*cobra.Command{newPushCmd(a), newPullCmd(a), newImageCmd(a)}
}

// remoteFlags are the flags of every command that talks to a registry.
type remoteFlags struct {
	flags        *pflag.FlagSet
	plainHTTP    config.PlainHTTP
	insecure     bool
	hostsDir     string
	dockerConfig string
}

func (rf *remoteFlags) register(f *pflag.FlagSet) {
	rf.flags = f
	f.Var(&rf.plainHTTP, "plain-http", "talk plain HTTP to every registry, or with =HOST[,HOST...] to those registries alone (local registries; default [resolve] plain_http)")
	f.Lookup("plain-http").NoOptDefVal = "true"
	f.BoolVar(&rf.insecure, "insecure", false, "skip TLS certificate verification (default [resolve] insecure)")
	f.StringVar(&rf.hostsDir, "hosts-dir", "", "containerd's registry host directory with HOST[_PORT_]/hosts.toml (mirrors, CAs, client certificates); \"\" reads none (default [resolve] registry_config_path)")
	f.StringVar(&rf.dockerConfig, "docker-config", "", "Docker config with credentials and helpers (default $DOCKER_CONFIG/config.json or ~/.docker/config.json)")
}

// options are the registry client options of a command: the configuration
// file's, with the flags given on the command line overriding them.
func (rf *remoteFlags) options(c *config.Resolve, conns int) registry.Options {
	o := c.RegistryOptions("weightsnap")
	if rf.flags.Changed("plain-http") {
		o.PlainHTTP, o.PlainHTTPHosts = rf.plainHTTP.All, rf.plainHTTP.Hosts
	}
	if rf.flags.Changed("insecure") {
		o.Insecure = rf.insecure
	}
	if rf.flags.Changed("hosts-dir") {
		o.HostsDir = rf.hostsDir
	}
	o.DockerConfig, o.Connections = rf.dockerConfig, conns
	return o
}

// openRemote opens the repository of ref with the command's registry options.
func (a *app) openRemote(ctx context.Context, rf *remoteFlags, ref string, conns int) (*registry.Remote, error) {
	return registry.New(ctx, ref, rf.options(&a.cfg.Resolve, conns))
}

// syncProgress makes a progress safe to feed from several goroutines.
type syncProgress struct {
	mu sync.Mutex
	pr *progress
}

func (s *syncProgress) start(label string, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pr == nil {
		s.pr = newProgress(label, total)
	}
}

func (s *syncProgress) Add(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pr != nil {
		s.pr.Add(n)
	}
}

func (s *syncProgress) Reused(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pr != nil {
		s.pr.Reused(n)
	}
}

func (s *syncProgress) End(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pr != nil {
		s.pr.End(err)
	}
}

func newPushCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var o oci.PushOptions
	var signKey string
	cmd := &cobra.Command{
		Use:   "push ID REF",
		Short: "Push an artifact to a registry as a ModelPack OCI artifact; prints registry/repo@digest",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			id, err := d.ExpandID(args[0])
			if err != nil {
				return err
			}
			l, err := d.Lookup(ctx, id, "")
			if err != nil {
				return err
			}
			defer l.Close()
			if signKey != "" {
				raw, err := os.ReadFile(signKey)
				if err != nil {
					return fmt.Errorf("--sign-key: %w", err)
				}
				if o.SignKey, err = trust.LoadPrivateKey(raw, []byte(os.Getenv("COSIGN_PASSWORD"))); err != nil {
					return fmt.Errorf("--sign-key %s: %w", signKey, err)
				}
			}
			r, err := a.openRemote(ctx, &rf, args[1], o.Concurrency)
			if err != nil {
				return err
			}
			var pr syncProgress
			pr.start("push", l.Index.TotalBytes())
			o.Progress = pr.Add
			rep, err := oci.Push(ctx, l, r, o)
			pr.End(err)
			if err != nil {
				return err
			}
			return a.printResult(rep, rep.Reference)
		},
	}
	f := cmd.Flags()
	rf.register(f)
	f.IntVar(&o.Concurrency, "concurrency", oci.DefaultConcurrency, "blobs uploaded at once")
	f.StringSliceVar(&o.MountFrom, "mount-from", nil, "repositories of the same registry to mount existing blobs from")
	f.StringVar(&signKey, "sign-key", "", "cosign private key (cosign generate-key-pair; password in $COSIGN_PASSWORD): attach a cosign v3 signature bundle as a referrer")
	f.BoolVar(&a.jsonOut, "json", false, "print a JSON report")
	return cmd
}

func newPullCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var o oci.PullOptions
	var chunk, ranges, policy string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an artifact from a registry into the store; prints the identity digest",
		Long: `Pull an artifact from a registry into the store.

An artifact weightsnap pushed carries its identity and tensor index. Any other
artifact whose layers are raw safetensors files (oras push, ModelPack tools) is
imported as "import" would import its files: --revision is then required.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			switch oci.RangeMode(ranges) {
			case oci.RangesOn, oci.RangesOff:
				o.Ranges = oci.RangeMode(ranges)
			case "auto":
			default:
				return fmt.Errorf("--ranges %q: want auto, on or off: %w", ranges, errdefs.ErrInvalidArgument)
			}
			n, err := bytefmt.Parse(chunk)
			if err != nil {
				return err
			}
			if n < oci.MinChunkSize || n > oci.MaxChunkSize {
				return fmt.Errorf("--chunk-size %s: want %s to %s: %w", chunk, bytefmt.IEC(oci.MinChunkSize), bytefmt.IEC(oci.MaxChunkSize), errdefs.ErrInvalidArgument)
			}
			o.ChunkSize = n
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			r, err := a.openRemote(ctx, &rf, args[0], o.Concurrency)
			if err != nil {
				return err
			}
			if policy == "" {
				policy = a.cfg.Verify.Policy
			}
			if o.Policy, err = trust.LoadPolicy(policy); err != nil {
				return err
			}
			var pr syncProgress
			o.OnPlan = func(p *oci.Plan) { pr.start("pull", p.TotalBytes()) }
			o.Progress, o.Reused = pr.Add, pr.Reused
			l, rep, err := oci.Pull(ctx, d, r, o)
			pr.End(err)
			if err != nil {
				return err
			}
			defer l.Close()
			if rep.Built && rep.Reused > 0 && !a.jsonOut {
				fmt.Fprintln(a.errOut, reusedLine(rep.Transfer))
			}
			return a.printResult(rep, rep.ID.String())
		},
	}
	f := cmd.Flags()
	rf.register(f)
	f.StringVar(&policy, "policy", "", "trust policy file checked before anything is published; default [verify] policy (absent: accepted unverified)")
	f.IntVar(&o.Concurrency, "concurrency", oci.DefaultConcurrency, "blob transfers (layers or ranges) in flight")
	f.IntVar(&o.FilesInFlight, "files", 0, "large files fetched at once: at most this many are partly written if the pull is killed (0: max(2, cores/2))")
	f.StringVar(&ranges, "ranges", "auto", "fetch large blobs in parallel ranges: auto (when there are fewer large files than --files, or the registry is 2 ms or more away or sends its blobs from another host), on, off")
	f.StringVar(&chunk, "chunk-size", "8MiB", "range size when fetching in ranges (--concurrency + 2 ranges are held in memory)")
	f.StringVar(&o.Import.Revision, "revision", "", "immutable model revision of an artifact weightsnap did not write")
	f.StringVar(&o.Import.Repository, "repository", "", "model repository name of an artifact weightsnap did not write")
	f.StringVar(&o.Import.Component, "component", "all", "component of an artifact weightsnap did not write")
	f.IntVar(&o.Import.TPSize, "tp-size", 0, "tensor-parallel size of a pre-sharded foreign artifact")
	f.IntVar(&o.Import.TPRank, "tp-rank", 0, "tensor-parallel rank of a pre-sharded foreign artifact")
	f.BoolVar(&a.jsonOut, "json", false, "print a JSON report")
	return cmd
}

func newImageCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Weight images: ordinary OCI images whose pointer layers name artifacts"}
	var rf remoteFlags
	var base, tag, platform, mode, layout, policy string
	var weights, at, repos []string
	build := &cobra.Command{
		Use:   "build --base IMAGE --weights ARTIFACT --at /models/NAME [--weights ... --at ...] [--layout hf [--repo ORG/NAME ...]] -t REF",
		Short: "Write a weight image: the base's layers plus one pointer layer per artifact; copies no blob",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if len(weights) != len(at) {
				return fmt.Errorf("%d --weights but %d --at: give one --at per --weights: %w", len(weights), len(at), errdefs.ErrInvalidArgument)
			}
			if len(repos) != 0 && len(repos) != len(weights) {
				return fmt.Errorf("%d --weights but %d --repo: give one --repo per --weights, or none: %w", len(weights), len(repos), errdefs.ErrInvalidArgument)
			}
			r, err := a.openRemote(ctx, &rf, tag, 4)
			if err != nil {
				return err
			}
			if policy == "" {
				policy = a.cfg.Verify.Policy
			}
			pol, err := trust.LoadPolicy(policy)
			if err != nil {
				return err
			}
			o := oci.ImageOptions{Base: base, Platform: platform, Mode: mode, Layout: layout, Policy: pol}
			for i := range weights {
				o.Weights = append(o.Weights, oci.WeightMount{Ref: weights[i], Target: at[i]})
				if len(repos) != 0 {
					o.Weights[i].Repo = repos[i]
				}
			}
			rep, err := oci.BuildImage(ctx, r, o)
			if err != nil {
				return err
			}
			return a.printResult(rep, rep.Reference)
		},
	}
	f := build.Flags()
	rf.register(f)
	f.StringVar(&base, "base", oci.Scratch, `base image reference, or "scratch" for weights only`)
	f.StringArrayVar(&weights, "weights", nil, "artifact reference (weightsnap-pushed); repeatable")
	f.StringArrayVar(&at, "at", nil, "absolute directory the preceding --weights is mounted at; repeatable")
	f.StringVarP(&tag, "tag", "t", "", "reference of the image to write (required)")
	f.StringVar(&platform, "platform", oci.HostPlatform(), "platform picked from a multi-platform base, and of a scratch image")
	f.StringVar(&mode, "mode", "", `when a node cannot get the weights: "required" (the pull fails) or "preferred" (the container starts without them; they come later); "" leaves it to the node's [snapshotter] mode`)
	f.StringVar(&layout, "layout", "", `"hf": each --at is a Hugging Face hub cache root (HF_HUB_CACHE) holding the artifact as its repository folder models--ORG--NAME (several artifacts may share one); "" for the artifact's own files`)
	f.StringArrayVar(&repos, "repo", nil, "Hugging Face repo id ORG/NAME of the preceding --weights with --layout hf (default: the artifact's model repository); one per --weights, or none")
	f.StringVar(&policy, "policy", "", "trust policy each artifact's manifest is checked against, as a pull checks it (default: [verify] policy)")
	f.BoolVar(&a.jsonOut, "json", false, "print a JSON report")
	build.MarkFlagRequired("tag")
	build.MarkFlagRequired("weights")
	cmd.AddCommand(build)
	return cmd
}

// isRemoteRef says whether an inspect argument is a registry reference: a
// local id is hex, optionally after "sha256:", so anything else with a "/"
// or ":" is remote.
func isRemoteRef(s string) bool {
	if rest, ok := strings.CutPrefix(s, "sha256:"); ok && !strings.ContainsAny(rest, "/:@") {
		return false
	}
	return strings.ContainsAny(s, "/:")
}

// addRemoteInspect gives the inspect command its remote flags and returns
// the hook that inspects a registry reference; it reports whether it
// handled the argument.
func addRemoteInspect(a *app, cmd *cobra.Command) func(cmd *cobra.Command, ref string) (bool, error) {
	var rf remoteFlags
	var platform string
	rf.register(cmd.Flags())
	cmd.Flags().StringVar(&platform, "platform", oci.HostPlatform(), "platform picked from a multi-platform image (remote references)")
	return func(cmd *cobra.Command, ref string) (bool, error) {
		if !isRemoteRef(ref) {
			return false, nil
		}
		ctx := cmd.Context()
		r, err := a.openRemote(ctx, &rf, ref, 4)
		if err != nil {
			return true, err
		}
		info, err := oci.InspectRemote(ctx, r, oci.InspectOptions{Platform: platform, Registries: a.cfg.Resolve.AllowedRegistries()})
		if err != nil {
			return true, err
		}
		if a.jsonOut {
			return true, a.printJSON(info)
		}
		return true, printRemote(a, info, "")
	}
}

func printRemote(a *app, info *oci.RemoteInfo, indent string) error {
	p := func(format string, args ...any) {
		text := strings.TrimSuffix(fmt.Sprintf(format, args...), "\n")
		for _, line := range strings.Split(text, "\n") {
			fmt.Fprintln(a.out, indent+line)
		}
	}
	p("Reference: %s\nManifest:  %s\nKind:      %s\n", info.Ref, info.Manifest, info.Kind)
	if info.Error != "" {
		p("Error:     %s\n", info.Error)
		return nil
	}
	if info.ArtifactType != "" {
		p("Type:      %s\n", info.ArtifactType)
	}
	if id := info.Identity; id != nil {
		p("Identity:  %s\nModel:     %s@%s\nComponent: %s\nDType:     %s\nLayout:    %s (tp %d/%d)\nProducer:  %s %s\n",
			info.ID, id.Model.Repository, id.Model.Revision, id.Component, id.Representation.DType,
			id.Layout.Name, id.Layout.TPRank, id.Layout.TPSize, id.Producer.Name, id.Producer.Version)
	}
	tensors := fmt.Sprint(info.TensorCount)
	for _, f := range info.Files {
		if f.Tensors < 0 && strings.HasSuffix(f.Path, ".safetensors") {
			tensors += "+unknown"
			break
		}
	}
	p("Size:      %s (%d bytes), %s tensors, %d layers\n", bytefmt.IEC(info.TotalBytes), info.TotalBytes, tensors, info.Layers)
	if len(info.Files) > 0 {
		p("Files:\n")
		tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		for _, f := range info.Files {
			t := fmt.Sprintf("%d tensors", f.Tensors)
			if f.Tensors < 0 {
				t = "-"
			}
			fmt.Fprintf(tw, "%s  %s\t%s\t%s\tsha256:%s\n", indent, f.Path, bytefmt.IEC(f.Size), t, artifact.ShortHex(f.SHA256))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, ptr := range info.Pointers {
		at := ptr.Target
		if ptr.Layout != "" {
			at = fmt.Sprintf("%s (layout %s, repo %s)", pointer.ViewDir(ptr.Pointer), ptr.Layout, ptr.Repo)
		}
		p("Pointer:   %s <- %s (identity %s, layer %s)\n", at, ptr.Artifact, ptr.ID.Short(), artifact.ShortHex(digest.Digest(ptr.Layer).Encoded()))
		if ptr.Info != nil {
			if err := printRemote(a, ptr.Info, indent+"    "); err != nil {
				return err
			}
		}
	}
	return nil
}
