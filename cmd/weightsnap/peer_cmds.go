package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/peer"
)

// PeerConfig is the [peer] table: this node's weight peer, and how it
// talks to the others. Flags override it.
type PeerConfig struct {
	// Listen is the address `peer serve` listens on (default ":7420").
	Listen string `toml:"listen"`
	// Peers are the peers to fetch from: host:port, IP addresses, or DNS
	// names with many addresses; resolution asks them before a registry.
	Peers []string `toml:"peers"`
	// TokenFile holds the bearer token, required by this node's server and
	// presented to others.
	TokenFile string `toml:"token_file"`
	// TLSCert and TLSKey are this node's certificate: the server's, and the
	// client's for mTLS. TLSClientCA makes the server require client
	// certificates signed by it; TLSCA is the CA of the peers' certificates.
	TLSCert     string `toml:"tls_cert"`
	TLSKey      string `toml:"tls_key"`
	TLSClientCA string `toml:"tls_client_ca"`
	TLSCA       string `toml:"tls_ca"`
	// Server limits and rails.
	MaxSessions int      `toml:"max_sessions"`
	MaxRails    int      `toml:"max_rails"`
	RailAddrs   []string `toml:"rail_addrs"`
	// FabricProvider is the libfabric provider of the rma plane: verbs, efa, tcp or sockets.
	FabricProvider string `toml:"fabric_provider"`
	// Mode and Rails are the client's defaults: tcp or rma, and rails asked for.
	Mode           string `toml:"mode"`
	Rails          int    `toml:"rails"`
	TimeoutSeconds int    `toml:"timeout_seconds"`
	// Staged are the allowlisted directories served as staged:NAME, and
	// StagedCeilingBytes what they may hold mapped at once.
	Staged             []peer.StagedDir `toml:"staged"`
	StagedCeilingBytes int64            `toml:"staged_ceiling_bytes"`
}

// peerFlags are the flags every peer command shares, over the [peer] table.
type peerFlags struct {
	tokenFile, tlsCert, tlsKey, tlsCA string
	timeout                           int
}

func (pf *peerFlags) register(f *pflag.FlagSet) {
	f.StringVar(&pf.tokenFile, "token-file", "", "file holding the bearer token (default: [peer] token_file)")
	f.StringVar(&pf.tlsCert, "tls-cert", "", "this node's TLS certificate (server; client certificate for mTLS)")
	f.StringVar(&pf.tlsKey, "tls-key", "", "key of --tls-cert")
	f.StringVar(&pf.tlsCA, "tls-ca", "", "CA of the peers' certificates: talk TLS to them")
	f.IntVar(&pf.timeout, "timeout", 0, "seconds every read, write and dial may take (default 30)")
}

// merged fills the flags left unset from the configuration.
func (pf peerFlags) merged(c *PeerConfig) peerFlags {
	if c == nil {
		return pf
	}
	pick := func(flag *string, cfg string) {
		if *flag == "" {
			*flag = cfg
		}
	}
	pick(&pf.tokenFile, c.TokenFile)
	pick(&pf.tlsCert, c.TLSCert)
	pick(&pf.tlsKey, c.TLSKey)
	pick(&pf.tlsCA, c.TLSCA)
	if pf.timeout == 0 {
		pf.timeout = c.TimeoutSeconds
	}
	return pf
}

func (pf peerFlags) token() (string, error) {
	if pf.tokenFile == "" {
		return "", nil
	}
	raw, err := os.ReadFile(pf.tokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

func (pf peerFlags) certificates() ([]tls.Certificate, error) {
	if pf.tlsCert == "" && pf.tlsKey == "" {
		return nil, nil
	}
	c, err := tls.LoadX509KeyPair(pf.tlsCert, pf.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return []tls.Certificate{c}, nil
}

func certPool(file string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate: %w", file, errdefs.ErrInvalidArgument)
	}
	return pool, nil
}

// client is the client configuration the flags and the table describe.
func (pf peerFlags) client() (peer.ClientConfig, error) {
	var c peer.ClientConfig
	var err error
	if c.Token, err = pf.token(); err != nil {
		return c, err
	}
	c.Timeout = time.Duration(pf.timeout) * time.Second
	if pf.tlsCA == "" {
		return c, nil
	}
	c.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	if c.TLS.RootCAs, err = certPool(pf.tlsCA); err != nil {
		return c, err
	}
	c.TLS.Certificates, err = pf.certificates()
	return c, err
}

func newPeerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "peer", Short: "The weight peer: serve this node's artifacts to others, list and fetch from them"}
	cmd.AddCommand(newPeerServeCmd(a), newPeerLsCmd(a), newPeerFetchCmd(a))
	return cmd
}

// stagedFlag parses NAME=PATH[@REVISION].
func stagedFlag(s string) (peer.StagedDir, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return peer.StagedDir{}, fmt.Errorf("--staged %q: want NAME=PATH[@REVISION]: %w", s, errdefs.ErrInvalidArgument)
	}
	p, rev, _ := strings.Cut(rest, "@")
	return peer.StagedDir{Name: name, Path: p, Revision: rev}, nil
}

func newPeerServeCmd(a *app) *cobra.Command {
	var pf peerFlags
	var listen, clientCA, provider string
	var maxSessions, maxRails int
	var railAddrs, staged []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve this node's READY artifacts (and allowlisted staged directories) to other nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c := a.cfg.Peer
			if c == nil {
				c = &PeerConfig{}
			}
			pf = pf.merged(c)
			set := cmd.Flags().Changed
			cfg := peer.ServerConfig{MaxSessions: c.MaxSessions, MaxRails: c.MaxRails, RailAddrs: c.RailAddrs,
				Provider: c.FabricProvider, Staged: c.Staged, StagedCeiling: c.StagedCeilingBytes,
				Timeout: time.Duration(pf.timeout) * time.Second}
			if set("max-sessions") {
				cfg.MaxSessions = maxSessions
			}
			if set("max-rails") {
				cfg.MaxRails = maxRails
			}
			if set("rail-addr") {
				cfg.RailAddrs = railAddrs
			}
			if set("fabric-provider") {
				cfg.Provider = provider
			}
			for _, s := range staged {
				d, err := stagedFlag(s)
				if err != nil {
					return err
				}
				cfg.Staged = append(cfg.Staged, d)
			}
			var err error
			if cfg.Token, err = pf.token(); err != nil {
				return err
			}
			if clientCA == "" {
				clientCA = c.TLSClientCA
			}
			if cfg.TLS, err = serverTLS(pf, clientCA); err != nil {
				return err
			}
			if !set("listen") && c.Listen != "" {
				listen = c.Listen
			}
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			s, err := peer.NewServer(d, cfg)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			fmt.Fprintf(a.errOut, "weightsnap peer: serving %s on %s (generation %s)\n", d.Root(), l.Addr(), s.Generation())
			return s.Serve(ctx, l)
		},
	}
	f := cmd.Flags()
	pf.register(f)
	f.StringVar(&listen, "listen", fmt.Sprintf(":%d", peer.DefaultPort), "address to listen on (control connections and tcp rails)")
	f.StringVar(&clientCA, "tls-client-ca", "", "require client certificates signed by this CA (mTLS; needs --tls-cert)")
	f.IntVar(&maxSessions, "max-sessions", peer.DefaultMaxSessions, "concurrent fetch sessions; more are answered busy")
	f.IntVar(&maxRails, "max-rails", peer.DefaultMaxRails, "rails one session may have")
	f.StringSliceVar(&railAddrs, "rail-addr", nil, "local addresses to serve rails on, one per NIC (default: the control connection's)")
	f.StringVar(&provider, "fabric-provider", "", "libfabric provider of the rma plane: verbs, efa, tcp, sockets (default: libfabric's choice)")
	f.StringArrayVar(&staged, "staged", nil, "allowlist a directory as staged:NAME: NAME=PATH[@REVISION] (repeatable)")
	return cmd
}

func serverTLS(pf peerFlags, clientCA string) (*tls.Config, error) {
	certs, err := pf.certificates()
	if err != nil || certs == nil {
		if clientCA != "" && err == nil {
			err = fmt.Errorf("--tls-client-ca needs --tls-cert and --tls-key: %w", errdefs.ErrInvalidArgument)
		}
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs}
	if clientCA != "" {
		if cfg.ClientCAs, err = certPool(clientCA); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func newPeerLsCmd(a *app) *cobra.Command {
	var pf peerFlags
	cmd := &cobra.Command{
		Use:   "ls ADDR",
		Short: "List what a peer holds: READY artifacts and allowlisted staged directories",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := pf.merged(a.cfg.Peer).client()
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
			fmt.Fprintf(tw, "IDENTITY\tREVISION\tCOMPONENT\tPRODUCER\tSIZE\tTENSORS\n")
			for _, x := range ls.Artifacts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", strings.TrimPrefix(x.IdentityDigest, "sha256:")[:12], short12(x.Revision),
					x.Component, x.Producer, humanBytes(x.Bytes), x.Tensors)
			}
			for _, s := range ls.Staged {
				state := "not staged"
				if s.Staged {
					state = "staged " + humanBytes(s.Bytes)
				}
				fmt.Fprintf(tw, "staged:%s\t%s\t\t\t%s\t\n", s.Name, short12(s.Revision), state)
			}
			tw.Flush()
			fmt.Fprintf(a.errOut, "peer %s: generation %s, %d of %d sessions, modes %v\n", addrs[0], ls.Generation[:12], ls.Sessions, ls.MaxSessions, ls.Modes)
			return nil
		},
	}
	pf.register(cmd.Flags())
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

func short12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// peerRequest turns a command-line id into a model request.
func peerRequest(id string) (string, error) {
	if strings.HasPrefix(id, "staged:") {
		return id, nil
	}
	hex := strings.TrimPrefix(id, "sha256:")
	if len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q: want an identity or manifest digest (64 hex digits) or staged:NAME: %w", id, errdefs.ErrInvalidArgument)
	}
	return "sha256:" + hex, nil
}

func newPeerFetchCmd(a *app) *cobra.Command {
	var pf peerFlags
	var o peer.FetchOptions
	var mode string
	cmd := &cobra.Command{
		Use:   "fetch ADDR ID",
		Short: "Fetch an artifact (or its tensors matching patterns) from peers into the store; prints the identity digest",
		Long: `Fetch an artifact from the first peer that holds it into the store.

ADDR is host:port, an IP address, a DNS name with many addresses (a Kubernetes
headless Service), or several of them separated by commas; on a failure the fetch
resumes from the next one with the bytes it has not verified yet. ID is an identity
digest, the digest of a store manifest, or staged:NAME[/SUBDIR] for a directory the
peer allowlisted. With --tensors only the matching tensors are fetched, into an
artifact of their own (producer tensor-subset).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c := a.cfg.Peer
			if c == nil {
				c = &PeerConfig{}
			}
			if !cmd.Flags().Changed("mode") && c.Mode != "" {
				mode = c.Mode
			}
			if !cmd.Flags().Changed("rails") && c.Rails > 0 {
				o.Rails = c.Rails
			}
			var err error
			if o.Mode, err = peer.ParseMode(mode); err != nil {
				return err
			}
			if o.Client, err = pf.merged(c).client(); err != nil {
				return err
			}
			req, err := peerRequest(args[1])
			if err != nil {
				return err
			}
			d, err := a.domain(ctx)
			if err != nil {
				return err
			}
			var pr syncProgress
			o.OnTotal = func(n int64) { pr.start("fetch", n) }
			o.Progress = pr.Add
			l, rep, err := peer.Fetch(ctx, d, []string{args[0]}, req, o)
			pr.Done()
			if err != nil {
				return err
			}
			defer l.Close()
			if a.jsonOut {
				return a.printJSON(rep)
			}
			fmt.Fprintln(a.out, rep.Identity)
			if rep.Built {
				fmt.Fprintf(a.errOut, "fetched %s from %s over %s with %d rails in %.2fs\n", humanBytes(rep.Fetched), rep.Peer, rep.Mode, rep.Rails, rep.Seconds)
			}
			return nil
		},
	}
	f := cmd.Flags()
	pf.register(f)
	f.StringVar(&mode, "mode", "tcp", "data plane: tcp, or rma (one-sided RDMA reads through libfabric)")
	f.IntVar(&o.Rails, "rails", peer.DefaultRails, "rails (parallel connections or fabric endpoints) to ask for")
	f.StringSliceVar(&o.Tensors, "tensors", nil, "fetch only the tensors matching these patterns (path.Match syntax, e.g. 'model.layers.0.*')")
	f.BoolVar(&a.jsonOut, "json", false, "print a JSON report")
	return cmd
}
