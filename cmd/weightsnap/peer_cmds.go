package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/weightsnap/weightsnap/internal/bytefmt"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/peer"
)

// peerFlags are the flags every peer command shares; each overrides its
// key of the [peer] table.
type peerFlags struct {
	tokenFile, tlsCert, tlsKey, tlsCA, congestion string
	timeout, connectTimeout                       int
}

func (pf *peerFlags) register(f *pflag.FlagSet) {
	f.StringVar(&pf.tokenFile, "token-file", "", "file holding the bearer token (default: [peer] token_file)")
	f.StringVar(&pf.tlsCert, "tls-cert", "", "this node's TLS certificate (the server's; the client's for mTLS)")
	f.StringVar(&pf.tlsKey, "tls-key", "", "key of --tls-cert")
	f.StringVar(&pf.tlsCA, "tls-ca", "", "CA of the peers' certificates: talk TLS to them")
	f.IntVar(&pf.timeout, "timeout", 0, "seconds any read, write or dial may take (default: [peer] timeout_seconds)")
	f.IntVar(&pf.connectTimeout, "connect-timeout", 0, "seconds reaching a peer may take: dial, TLS handshake, first answer (default: [peer] connect_timeout_seconds)")
	f.StringVar(&pf.congestion, "tcp-congestion", "", "TCP congestion control of the peer's connections, e.g. cubic (default: [peer] tcp_congestion, else the host's)")
}

// apply returns the [peer] table with the flags given on the command line.
func (pf peerFlags) apply(cmd *cobra.Command, c config.Peer) config.Peer {
	set := cmd.Flags().Changed
	for _, o := range []struct {
		flag string
		dst  *string
		v    string
	}{{"token-file", &c.TokenFile, pf.tokenFile}, {"tls-cert", &c.TLSCert, pf.tlsCert}, {"tls-key", &c.TLSKey, pf.tlsKey}, {"tls-ca", &c.TLSCA, pf.tlsCA}, {"tcp-congestion", &c.TCPCongestion, pf.congestion}} {
		if set(o.flag) {
			*o.dst = o.v
		}
	}
	if set("timeout") {
		c.TimeoutSeconds = pf.timeout
	}
	if set("connect-timeout") {
		c.ConnectTimeoutSeconds = pf.connectTimeout
	}
	return c
}

func newPeerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "peer", Short: "The weight peer: serve this node's artifacts to others, list and fetch from them"}
	cmd.AddCommand(newPeerServeCmd(a), newPeerLsCmd(a), newPeerFetchCmd(a))
	return cmd
}

// exportFlag parses NAME=PATH[@REVISION], the value of --export (or
// --staged, its first name, after the wire's token staged:NAME).
func exportFlag(s string) (peer.Export, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return peer.Export{}, fmt.Errorf("--export %q: want NAME=PATH[@REVISION]: %w", s, errdefs.ErrInvalidArgument)
	}
	p, rev, _ := strings.Cut(rest, "@")
	return peer.Export{Name: name, Path: p, Revision: rev}, nil
}

// exportAlias reads the flag --staged, the first name of --export, as
// --export.
func exportAlias(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if name == "staged" {
		name = "export"
	}
	return pflag.NormalizedName(name)
}

func newPeerServeCmd(a *app) *cobra.Command {
	var pf peerFlags
	var listen, clientCA, provider string
	var maxSessions, maxChildren, maxRails int
	var railAddrs, exports []string
	var allowUnauth bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve this node's READY artifacts (and exported directories) to other nodes",
		Long: `Serve this node's READY artifacts, and the directories [[peer.exports]] or --export
names, to other nodes until interrupted. weightsnapd serves the same when
[peer] serve is true; this command is for a node without the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c := pf.apply(cmd, a.cfg.Peer)
			set := cmd.Flags().Changed
			if set("listen") {
				c.Listen = listen
			}
			if set("tls-client-ca") {
				c.TLSClientCA = clientCA
			}
			if set("max-sessions") {
				c.MaxSessions = maxSessions
			}
			if set("max-children") {
				c.MaxChildren = maxChildren
			}
			if set("max-rails") {
				c.MaxRails = maxRails
			}
			if set("rail-addr") {
				c.RailAddrs = railAddrs
			}
			if set("fabric-provider") {
				c.FabricProvider = provider
			}
			if set("allow-unauthenticated") {
				c.AllowUnauthenticated = allowUnauth
			}
			for _, s := range exports {
				d, err := exportFlag(s)
				if err != nil {
					return err
				}
				c.Exports = append(c.Exports, d)
			}
			cfg, err := c.ServerConfig()
			if err != nil {
				return err
			}
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			s, err := peer.NewServer(d, cfg)
			if err != nil {
				return err
			}
			l, err := peer.Listen(ctx, c.Listen, c.TCPCongestion)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			fmt.Fprintf(a.errOut, "weightsnap peer: serving %s on %s (generation %s)\n", d.Root(), l.Addr(), s.Generation())
			if c.Unauthenticated() {
				fmt.Fprintf(a.errOut, "weightsnap peer: WARNING: no token and no client certificates: any host that reaches %s can read every artifact\n", l.Addr())
			}
			return s.Serve(ctx, l)
		},
	}
	f := cmd.Flags()
	pf.register(f)
	f.StringVar(&listen, "listen", "", "address to listen on: control connections and tcp rails (default: [peer] listen, 127.0.0.1:7420)")
	f.BoolVar(&allowUnauth, "allow-unauthenticated", false, "listen beyond loopback with neither a token nor mTLS (default: [peer] allow_unauthenticated)")
	f.StringVar(&clientCA, "tls-client-ca", "", "require client certificates signed by this CA (mTLS; needs --tls-cert)")
	f.IntVar(&maxSessions, "max-sessions", 0, "fetch sessions served at once; more are answered busy (default: [peer] max_sessions)")
	f.IntVar(&maxChildren, "max-children", 0, "sessions served of one artifact at once; more are answered busy (default: [peer] max_children)")
	f.IntVar(&maxRails, "max-rails", 0, "rails one session may have (default: [peer] max_rails)")
	f.StringSliceVar(&railAddrs, "rail-addr", nil, "local addresses to serve rails on, one per NIC (default: the control connection's)")
	f.StringVar(&provider, "fabric-provider", "", "libfabric provider of the rma plane: verbs, efa, tcp, sockets (default: libfabric's choice)")
	f.StringArrayVar(&exports, "export", nil, "export a directory as staged:NAME: NAME=PATH[@REVISION] (repeatable; --staged is read as --export)")
	f.SetNormalizeFunc(exportAlias)
	return cmd
}

func newPeerLsCmd(a *app) *cobra.Command {
	var pf peerFlags
	cmd := &cobra.Command{
		Use:   "ls ADDR",
		Short: "List what a peer holds: READY artifacts, those it builds or its node's resolves look for, and exported directories",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := pf.apply(cmd, a.cfg.Peer).ClientConfig()
			if err != nil {
				return err
			}
			addrs, err := peer.ExpandPeers(cmd.Context(), []string{args[0]})
			if err != nil {
				return err
			}
			ls, err := c.List(cmd.Context(), addrs[0])
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ls)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "IDENTITY\tREPOSITORY\tREVISION\tCOMPONENT\tPRODUCER\tSIZE\tTENSORS\tSTRIPES\n")
			for _, x := range ls.Artifacts {
				size := bytefmt.IEC(x.Bytes)
				if x.Building {
					size = fmt.Sprintf("%s of %s verified (building)", bytefmt.IEC(x.VerifiedBytes), size)
				}
				stripes := make([]string, len(x.Stripes))
				for i, st := range x.Stripes {
					stripes[i] = fmt.Sprintf("%d/%d:%d", st.Index, st.Count, st.Sessions)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", x.ID.Short(), cmp.Or(x.Repository, "-"), artifact.ShortHex(x.Revision),
					x.Component, x.Producer, size, x.Tensors, cmp.Or(strings.Join(stripes, " "), "-"))
			}
			for _, id := range ls.Wants {
				fmt.Fprintf(tw, "%s\t-\t-\t\t\twanted: a resolve looks for a source\t\t-\n", id.Short())
			}
			for _, s := range ls.Exports {
				state := "not mapped"
				if s.Mapped {
					state = "mapped " + bytefmt.IEC(s.Bytes)
				}
				fmt.Fprintf(tw, "staged:%s\t-\t%s\t\t\t%s\t\t\n", s.Name, artifact.ShortHex(s.Revision), state)
			}
			tw.Flush()
			fmt.Fprintf(a.errOut, "peer %s: generation %s, %d of %d sessions, modes %v\n", addrs[0], artifact.ShortHex(ls.Generation), ls.Sessions, ls.MaxSessions, ls.Modes)
			return nil
		},
	}
	pf.register(cmd.Flags())
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

// peerRequest turns a command-line id into a model request: staged:NAME,
// or an identity or manifest digest, sha256:<64 hex> or the hex alone. A
// shorter hex prefix is looked up in the peers' listings (LookupPrefix).
func peerRequest(ctx context.Context, c peer.ClientConfig, addrs []string, id string) (string, error) {
	if strings.HasPrefix(id, "staged:") {
		return id, nil
	}
	// An identity and a manifest digest have one form: sha256:<64 hex>.
	if d, err := artifact.ParseID(id); err == nil {
		return d.String(), nil
	}
	if d, err := artifact.ParseIDHex(id); err == nil {
		return d.String(), nil
	}
	if isHexPrefix(id) {
		return c.LookupPrefix(ctx, addrs, id)
	}
	return "", fmt.Errorf("%q: want an identity or manifest digest (64 hex digits, or a unique prefix of one) or staged:NAME: %w", id, errdefs.ErrInvalidArgument)
}

// isHexPrefix says whether s could begin a sha256 in lower-case hex.
func isHexPrefix(s string) bool {
	return s != "" && len(s) < 64 && artifact.IsSHA256Hex(s+strings.Repeat("0", 64-len(s)))
}

func newPeerFetchCmd(a *app) *cobra.Command {
	var pf peerFlags
	var mode string
	var rails int
	var tensors []string
	cmd := &cobra.Command{
		Use:   "fetch ADDR ID",
		Short: "Fetch an artifact (or its tensors matching patterns) from peers into the store; prints the identity digest",
		Long: `Fetch an artifact from the first peer that holds it into the store.

ADDR is host:port, an IP address, a DNS name with many addresses (a Kubernetes
headless Service), or several of them separated by commas; on a failure the fetch
resumes from the next one with the bytes it has not verified yet. ID is an identity
digest, the digest of a store manifest, or staged:NAME[/SUBDIR] for a directory the
peer exports. With --tensors only the matching tensors are fetched, into an
artifact of their own (producer tensor-subset).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c := pf.apply(cmd, a.cfg.Peer)
			if cmd.Flags().Changed("mode") {
				c.Mode = mode
			}
			if cmd.Flags().Changed("rails") {
				c.Rails = rails
			}
			o, err := c.FetchOptions()
			if err != nil {
				return err
			}
			o.Tensors = tensors
			pol, err := a.cfg.Verify.LoadPolicy()
			if err != nil {
				return err
			}
			// The fetch names no reference: the policy's default (or the
			// scope of [resolve] registry) applies to what the peer sends
			// with the artifact, checked offline before any payload byte,
			// and to the store's records of one it holds already. A tensor
			// subset is an artifact no signature names.
			gate := &oci.Gate{Policy: pol, Default: a.cfg.Resolve.Registry}
			if len(tensors) > 0 {
				if err := gate.Unsigned(""); err != nil {
					return fmt.Errorf("weightsnap peer fetch --tensors: %w", err)
				}
			}
			addrs, err := peer.ExpandPeers(ctx, []string{args[0]})
			if err != nil {
				return err
			}
			// The prefix lookup and the fetch share what they learn of
			// peers that do not answer.
			o.Client.Down = peer.NewDownPeers()
			req, err := peerRequest(ctx, o.Client, addrs, args[1])
			if err != nil {
				return err
			}
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			if len(tensors) == 0 {
				o.Admit = func(ctx context.Context, id artifact.ID, prod artifact.Producer) error {
					return gate.Admit(ctx, d, id, "", prod)
				}
				o.Hit = func(ctx context.Context, id artifact.ID) error {
					return gate.Hit(ctx, d, id, "")
				}
			}
			var pr syncProgress
			o.OnTotal = func(n int64) { pr.start("fetch", n) }
			o.Progress = pr.Add
			l, rep, err := peer.Fetch(ctx, d, []string{args[0]}, req, o)
			pr.End(err)
			if err != nil {
				return err
			}
			defer l.Close()
			if a.jsonOut {
				return a.printJSON(rep)
			}
			fmt.Fprintln(a.out, rep.ID)
			if rep.Built {
				fmt.Fprintf(a.errOut, "fetched %s from %s over %s with %d rails in %.2fs\n", bytefmt.IEC(rep.Fetched), rep.Endpoint, rep.Mode, rep.Rails, rep.Seconds)
				if rep.Reused > 0 {
					fmt.Fprintln(a.errOut, reusedLine(rep.Transfer))
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	pf.register(f)
	f.StringVar(&mode, "mode", "tcp", "data plane: tcp, or rma (one-sided RDMA reads through libfabric) (default: [peer] mode)")
	f.IntVar(&rails, "rails", 0, "rails (parallel connections or fabric endpoints) to ask for; 0 is one per core, at most 4 (default: [peer] rails)")
	f.StringSliceVar(&tensors, "tensors", nil, "fetch only the tensors matching these patterns (path.Match syntax, e.g. 'model.layers.0.*')")
	f.BoolVar(&a.jsonOut, "json", false, "print a JSON report")
	return cmd
}
