// Package config is the one configuration file that weightsnap (the CLI) and
// weightsnapd (the daemon) both load: /etc/weightsnap/config.toml by default.
// Every key has a default, so a file may hold only the keys it changes (a
// [store] table with only max_store_bytes is complete); unknown keys are
// refused. Default() is the whole file with its defaults, which
// `weightsnapd config default` prints.
//
// Other engineers' tables ([peer]) are added here as fields of
// Config with their own defaults in Default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/staging"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// DefaultPath is the configuration file both commands read when none is named.
const DefaultPath = "/etc/weightsnap/config.toml"

// EnvPath is the environment variable naming the configuration file when
// --config does not.
const EnvPath = "WEIGHTSNAP_CONFIG"

// PathFlag registers --config on fs: the file named, else $WEIGHTSNAP_CONFIG,
// else DefaultPath.
func PathFlag(fs *pflag.FlagSet, p *string, shared string) {
	def := DefaultPath
	if env := os.Getenv(EnvPath); env != "" {
		def = env
	}
	fs.StringVar(p, "config", def, "configuration file (TOML), shared with "+shared+"; $"+EnvPath+" when not given")
}

// Config is the whole configuration file, loaded once.
type Config struct {
	// Path is the file the configuration was read from; "" for the
	// defaults alone.
	Path  string       `toml:"-"`
	Root  string       `toml:"root" comment:"Store root: the domain's directory. weightsnap --root, then $WEIGHTSNAP_ROOT, override it. The default is\n/var/lib/weightsnap for root, else $XDG_DATA_HOME/weightsnap."`
	Store store.Policy `toml:"store" comment:"The store's policy, applied at every start of weightsnap and weightsnapd: each key set here is recorded in the\nstore's domain-policy.json, a key left out keeps the store's value. Sizes take units: 300MiB, 1GiB, or bytes."`
	// StoreKeys are the keys of [store] the file sets, in the order of
	// store.Policy's fields: those that apply to an existing store.
	StoreKeys   []string    `toml:"-"`
	Resolve     Resolve     `toml:"resolve" comment:"Resolution: defaults of weightsnap resolve (its flags override them) and of the daemon."`
	Snapshotter Snapshotter `toml:"snapshotter" comment:"weightsnapd's containerd snapshotter."`
	CRI         CRI         `toml:"cri" comment:"weightsnapd's CRI image service: the kubelet's image service endpoint, forwarded to containerd's CRI,\nchecking each pull's own credentials with the registry, and pulling artifacts as weights-only images."`
	Metrics     Metrics     `toml:"metrics" comment:"weightsnapd's Prometheus metrics."`
	Peer        Peer        `toml:"peer" comment:"The weight peer: this node serving its artifacts to others (weightsnapd, weightsnap peer serve),\nand the peers it fetches from (weightsnap peer fetch, resolution before any registry)."`
	Staging     Staging     `toml:"staging" comment:"weightsnap stage: where ledgers live and how staging runs (recipes say what is staged)."`
	Verify      Verify      `toml:"verify" comment:"Signatures: the trust policy artifacts from registries are checked against."`
	Prefetch    Prefetch    `toml:"prefetch" comment:"weightsnapd's declared artifacts: TOML files of [[artifact]] ref, identity, pin, resolved into the\nstore (store, peers, registry) before any pod asks, pinned as they say; an entry that leaves is unpinned."`
}

// Prefetch is the [prefetch] table.
type Prefetch struct {
	Dir             string `toml:"dir" comment:"directory of prefetch files (*.toml; a ConfigMap mounted there is followed); \"\" turns prefetch off"`
	RetryMaxSeconds int    `toml:"retry_max_seconds" comment:"longest wait between two tries of an entry that does not resolve; the first is after 1 s, each next one twice the last"`
}

// Peer is the [peer] table.
type Peer struct {
	Serve  bool   `toml:"serve" comment:"weightsnapd serves this node's READY artifacts and staged directories to other nodes"`
	Listen string `toml:"listen" comment:"address the peer listens on: control connections and tcp rails; beyond loopback it needs token_file,\nmTLS (tls_cert, tls_key, tls_client_ca) or allow_unauthenticated"`
	// AllowUnauthenticated lets the peer listen beyond loopback with neither
	// a token nor client certificates: any host that reaches the port reads
	// every artifact.
	AllowUnauthenticated bool `toml:"allow_unauthenticated" comment:"serve beyond loopback with neither token_file nor tls_client_ca: any host that reaches\nthe port can read every artifact"`
	// Peers are the peers to fetch from: host:port, IP addresses, or DNS
	// names with many addresses; resolution asks them before a registry.
	Peers          []string `toml:"peers" comment:"peers to fetch from, in order: host:port, IPs, or DNS names with many addresses (a headless Service)"`
	TokenFile      string   `toml:"token_file" comment:"file holding the bearer token this node's peer requires and presents to others; \"\" for none"`
	TLSCert        string   `toml:"tls_cert" comment:"this node's certificate (PEM): the peer's, and the client's for mTLS; \"\" for plain TCP"`
	TLSKey         string   `toml:"tls_key" comment:"key of tls_cert"`
	TLSClientCA    string   `toml:"tls_client_ca" comment:"CA the peer requires client certificates from (mTLS); \"\" accepts any client"`
	TLSCA          string   `toml:"tls_ca" comment:"CA of other peers' certificates: talk TLS to them; \"\" for plain TCP"`
	MaxSessions    int      `toml:"max_sessions" comment:"fetch sessions served at once; more are answered busy"`
	MaxChildren    int      `toml:"max_children" comment:"sessions served of one artifact at once (children); more are answered busy, and a node\nfetching picks a holder, else a builder, with fewer"`
	Structure      string   `toml:"structure" comment:"how nodes missing an artifact together carry it from the one that pulls it: chain (from a holder\nor a builder with a free child slot), or forest (each node places itself in a striped forest of the\npeers and itself and takes each stripe's pieces from its source there; needs advertise)"`
	Advertise      string   `toml:"advertise" comment:"host:port other nodes reach this node's peer at, as in their peers list; \"\" is listen unless\nit is a wildcard. With it, nodes missing an artifact together agree on one of them to pull it from the registry"`
	MaxRails       int      `toml:"max_rails" comment:"rails one session may have"`
	RailAddrs      []string `toml:"rail_addrs" comment:"local addresses rails are served on, rail r on entry r modulo their count (one per NIC); empty: the control connection's"`
	FabricProvider string   `toml:"fabric_provider" comment:"libfabric provider of the rma plane: verbs (InfiniBand, RoCE), efa, tcp, sockets; \"\" lets libfabric choose"`
	Mode           string   `toml:"mode" comment:"data plane this node fetches with: tcp, or rma (needs a build with libfabric)"`
	Rails          int      `toml:"rails" comment:"rails this node asks for; 0 is one per core, at most 4"`
	TimeoutSeconds int      `toml:"timeout_seconds" comment:"seconds any read, write or dial may take"`
	// ConnectTimeoutSeconds bounds reaching a peer (dial, TLS handshake,
	// its first answer): what a peer that is down or black-holed costs.
	ConnectTimeoutSeconds int `toml:"connect_timeout_seconds" comment:"seconds reaching a peer may take (dial, TLS handshake, its first answer), at most timeout_seconds:\na peer that is down or accepts and never answers costs this much before the next peer, then the registry, is asked"`
	// TCPCongestion is the TCP congestion control algorithm of the peer's
	// connections, served and opened; "" keeps the host's.
	TCPCongestion string `toml:"tcp_congestion" comment:"TCP congestion control of the connections this node's peer serves and opens (TCP_CONGESTION),\ne.g. cubic where the host runs bbr (docs/fleet.md); \"\" keeps the host's"`
	// SlowSourceSeconds is the striped fetch's slow-source rule
	// (peer.Provider's SlowAfter): its window, 0 for off.
	SlowSourceSeconds int `toml:"slow_source_seconds" comment:"forest only: seconds over which each stripe's rate of verified bytes is measured; a stripe whose rate\nstays below a third of the median of this node's other stripes for that long, twice for each hop of the\nnode's depth in the stripe, is taken over by an adopter with room. 0 keeps every stripe with its source"`
	// Exports are the peer's exported directories, served as staged:NAME
	// (the wire's token).
	Exports            []peer.Export `toml:"exports" comment:"allowlisted directories served as staged:NAME[/SUBDIR]: [[peer.exports]] name, path, revision, repository, component\n([[peer.staged]], their first name, is read too)"`
	ExportCeilingBytes int64         `toml:"export_ceiling_bytes" comment:"bytes the exported directories may hold mapped at once (staged_ceiling_bytes, its first name, is read too)"`
	// StagedAlias and StagedCeilingAlias are the first names of exports and
	// export_ceiling_bytes, still read: Parse folds them into those.
	StagedAlias        []peer.Export `toml:"staged,omitempty"`
	StagedCeilingAlias *int64        `toml:"staged_ceiling_bytes,omitempty"`
}

// Resolve is the [resolve] table.
type Resolve struct {
	Mode       string `toml:"mode" comment:"disabled, preferred or required (weightsnap resolve)"`
	Validation string `toml:"validation" comment:"lookup validation: manifest_and_metadata or full_checksum; \"\" uses the domain's policy"`
	Registry   string `toml:"registry" comment:"repository (host/repo) whose identity tags are tried after the local store; \"\" for none"`
	// Registries are the only hosts contacted on behalf of what images say:
	// a weight image's pointer labels, and the artifacts a weight image
	// names when it is inspected. Registry's host is always included.
	Registries         []string  `toml:"registries" comment:"registry hosts (host[:port]) that a weight image's pointers may name; no other host is contacted for them"`
	PlainHTTP          PlainHTTP `toml:"plain_http" comment:"talk plain HTTP to registries (local test registries): true for every registry, or a list of\nregistries (host[:port], as references name them) such as [\"127.0.0.1:5500\"], the others staying HTTPS"`
	Insecure           bool      `toml:"insecure" comment:"skip TLS certificate verification"`
	RegistryConfigPath string    `toml:"registry_config_path" comment:"containerd's registry host directory (HOST[_PORT_]/hosts.toml: mirrors in order, then the server, with\ncapabilities, ca, client, skip_verify, header, override_path); a registry without a directory there is\nreached directly as plain_http and insecure say; \"\" reads none"`
	AllowLocalBuild    bool      `toml:"allow_local_build" comment:"let local producers build a missing artifact (weightsnap resolve)"`
	// AllowPostLoadPublish lets weightsnapd publish what a started engine
	// made (a compile cache: POST /v1/publish on the control socket). The
	// CLI's weightsnap publish, a user's explicit ask, publishes whatever
	// it says.
	AllowPostLoadPublish       bool `toml:"allow_post_load_publish" comment:"let weightsnapd publish what an engine made after it loaded (a compile cache, weightsnap publish --daemon,\nPOST /v1/publish on the control socket); weightsnap publish without --daemon publishes whatever this says"`
	CoordinationTimeoutSeconds int  `toml:"coordination_timeout_seconds" comment:"seconds to wait for each lock; 0 uses [store] coordination_timeout_seconds"`
}

// Snapshotter is the [snapshotter] table.
type Snapshotter struct {
	Address         string `toml:"address" comment:"unix socket containerd's proxy plugin connects to (created with mode 0660)"`
	ControlAddress  string `toml:"control_address" comment:"unix socket of the control API (weightsnap mount, umount, inspect), mode 0660; \"\" turns it off"`
	Root            string `toml:"root" comment:"snapshot directory; \"\" means <root>/snapshots. It must be on the store's filesystem."`
	Mode            string `toml:"mode" comment:"when a weight layer's artifact cannot be had and its image does not say (weightsnap image build --mode):\nrequired: its Prepare fails with the reason; preferred: the pointer layer unpacks (the container starts\nwithout the weights) and a background repair fills them in once the artifact resolves"`
	RetryMaxSeconds int    `toml:"retry_max_seconds" comment:"longest wait between two tries of a background repair (fallback snapshots, leases not taken again at start); the first is after 1 s, each next one twice the last"`
}

// Metrics is the [metrics] table.
type Metrics struct {
	Address string `toml:"address" comment:"host:port serving /metrics; \"\" turns metrics off. Keep it on loopback unless the network\nit listens on is the cluster's (a DaemonSet pod's own address)"`
}

// Staging is the [staging] table.
type Staging struct {
	Dir                  string `toml:"dir" comment:"ledgers, journals and locks of staged lanes; \"\" means <root>/staging"`
	Node                 string `toml:"node" comment:"this node's name in ledgers; \"\" means the host name"`
	Workers              int    `toml:"workers" comment:"files staged at once (each with up to 8 reads of 1 MiB in flight)"`
	SourceTimeoutSeconds int    `toml:"source_timeout_seconds" comment:"seconds a source may take to answer the preflight's reachability check"`
}

// StagingDir is the staging state directory: [staging] dir, or <root>/staging.
func (c *Config) StagingDir(root string) string {
	if c.Staging.Dir != "" {
		return c.Staging.Dir
	}
	return filepath.Join(root, staging.DirName)
}

// Default is the configuration with every default filled in.
func Default() Config {
	return Config{
		Root:  DefaultRoot(),
		Store: store.DefaultPolicy(),
		Resolve: Resolve{
			Mode:               string(resolve.Preferred),
			Registries:         []string{},
			RegistryConfigPath: "/etc/containerd/certs.d",
			AllowLocalBuild:    true,
		},
		Snapshotter: Snapshotter{Address: "/run/weightsnap/snapshotter.sock", ControlAddress: "/run/weightsnap/control.sock",
			Mode: string(resolve.Required), RetryMaxSeconds: 300},
		CRI:      DefaultCRI(),
		Metrics:  Metrics{Address: "127.0.0.1:9878"},
		Staging:  Staging{Workers: 4, SourceTimeoutSeconds: 30},
		Prefetch: Prefetch{Dir: "/etc/weightsnap/prefetch.d", RetryMaxSeconds: 300},
		Verify:   Verify{Policy: trust.DefaultPolicyPath},
		Peer: Peer{Listen: fmt.Sprintf("127.0.0.1:%d", peer.DefaultPort), Peers: []string{}, MaxSessions: peer.DefaultMaxSessions, MaxChildren: peer.DefaultMaxChildren,
			Structure: string(peer.StructureChain), MaxRails: peer.DefaultMaxRails, RailAddrs: []string{}, Mode: string(peer.ModeTCP),
			TimeoutSeconds: int(peer.DefaultTimeout.Seconds()), ConnectTimeoutSeconds: int(peer.DefaultConnectTimeout.Seconds()), SlowSourceSeconds: int(peer.DefaultSlowAfter.Seconds()), Exports: []peer.Export{}, ExportCeilingBytes: peer.DefaultExportCeiling},
	}
}

// EnvRoot is the environment variable naming the store root: it beats the
// file's root, and the CLI's --root beats it.
const EnvRoot = "WEIGHTSNAP_ROOT"

// DefaultRoot is the store root when neither a flag, the environment nor
// the file names one: /var/lib/weightsnap for root, else
// $XDG_DATA_HOME/weightsnap.
func DefaultRoot() string {
	if os.Geteuid() == 0 {
		return "/var/lib/weightsnap"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "weightsnap")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "weightsnap")
}

// Load reads the file at path over the defaults, then the environment
// ($WEIGHTSNAP_ROOT) over the file. An empty path, or a missing file at
// DefaultPath, gives the defaults; any other missing file is
// errdefs.ErrInvalidArgument.
func Load(path string) (Config, error) {
	cfg, err := loadFile(path)
	if env := os.Getenv(EnvRoot); env != "" {
		cfg.Root = env
	}
	return cfg, err
}

// loadFile is Load without the environment.
func loadFile(path string) (Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && path == DefaultPath {
		return cfg, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return cfg, fmt.Errorf("config: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	cfg, err = Parse(path, raw)
	cfg.Path = path
	return cfg, err
}

// Parse decodes a file's bytes over the defaults and validates the result;
// name labels errors.
func Parse(name string, raw []byte) (Config, error) {
	cfg := Default()
	dec := toml.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.EnableUnmarshalerInterface()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, decodeError(err))
	}
	if err := cfg.Peer.foldAliases(raw); err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, err)
	}
	keys, err := storeKeys(raw)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, err)
	}
	cfg.StoreKeys = keys
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, err)
	}
	return cfg, nil
}

// storeKeys are the keys of the [store] table in raw, a file the decoder
// took, in the order of store.Policy's fields.
func storeKeys(raw []byte) ([]string, error) {
	var file struct {
		Store map[string]any `toml:"store"`
	}
	if err := toml.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("[store]: %w", decodeError(err))
	}
	var keys []string
	for _, k := range store.PolicyKeys() {
		if _, ok := file.Store[k]; ok {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// decodeError says what is wrong with a file the decoder refused: every
// unknown key with its line at once, else the decoder's own message (which
// names the line), classified as invalid input.
func decodeError(err error) error {
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &strict):
		keys := make([]string, len(strict.Errors))
		for i, e := range strict.Errors {
			row, _ := e.Position()
			keys[i] = fmt.Sprintf("line %d: %s", row, strings.Join(e.Key(), "."))
		}
		return fmt.Errorf("unknown keys (`weightsnapd config default` lists every key): %s: %w", strings.Join(keys, "; "), errdefs.ErrInvalidArgument)
	case errors.As(err, &de):
		row, _ := de.Position()
		return fmt.Errorf("line %d: %s: %w", row, de.Error(), errdefs.ErrInvalidArgument)
	case errdefs.IsInvalidArgument(err):
		return err
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
}

// Validate checks the values the type system does not.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if c.Root == "" {
		return bad("root is empty")
	}
	if err := c.Store.Validate(); err != nil {
		return fmt.Errorf("[store] %w", err)
	}
	if err := evict.CheckPolicy(c.Store); err != nil {
		return fmt.Errorf("[store] %w", err)
	}
	if _, err := resolve.ParseMode(c.Resolve.Mode); err != nil {
		return fmt.Errorf("[resolve] %w", err)
	}
	switch store.ValidationMode(c.Resolve.Validation) {
	case "", store.ManifestAndMetadata, store.FullChecksum:
	default:
		return bad("[resolve] validation %q: want manifest_and_metadata or full_checksum", c.Resolve.Validation)
	}
	if err := c.Resolve.PlainHTTP.validate(); err != nil {
		return fmt.Errorf("[resolve] %w", err)
	}
	if c.Resolve.CoordinationTimeoutSeconds < 0 {
		return bad("[resolve] coordination_timeout_seconds is negative")
	}
	if c.Snapshotter.Address == "" {
		return bad("[snapshotter] address is empty")
	}
	if m := resolve.Mode(c.Snapshotter.Mode); m != resolve.Required && m != resolve.Preferred {
		return bad("[snapshotter] mode %q: want required or preferred", c.Snapshotter.Mode)
	}
	if c.Snapshotter.RetryMaxSeconds < 1 {
		return bad("[snapshotter] retry_max_seconds must be at least 1")
	}
	if err := c.CRI.validate(); err != nil {
		return err
	}
	if _, err := peer.ParseMode(c.Peer.Mode); err != nil {
		return fmt.Errorf("[peer] %w", err)
	}
	if _, err := peer.ParseStructure(c.Peer.Structure); err != nil {
		return fmt.Errorf("[peer] %w", err)
	}
	if p := c.Peer; p.MaxSessions < 0 || p.MaxChildren < 0 || p.MaxRails < 0 || p.Rails < 0 || p.TimeoutSeconds < 0 || p.ConnectTimeoutSeconds < 0 || p.ExportCeilingBytes < 0 || p.SlowSourceSeconds < 0 {
		return bad("[peer] max_sessions, max_children, max_rails, rails, timeout_seconds, connect_timeout_seconds, export_ceiling_bytes and slow_source_seconds must not be negative")
	}
	if (c.Peer.TLSCert == "") != (c.Peer.TLSKey == "") || (c.Peer.TLSClientCA != "" && c.Peer.TLSCert == "") {
		return bad("[peer] tls_cert and tls_key go together, and tls_client_ca needs them")
	}
	if c.Staging.Workers < 1 || c.Staging.SourceTimeoutSeconds < 1 {
		return bad("[staging] workers and source_timeout_seconds must be at least 1")
	}
	if c.Prefetch.RetryMaxSeconds < 1 {
		return bad("[prefetch] retry_max_seconds must be at least 1")
	}
	if a := c.Metrics.Address; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("[metrics] address %q: %v", a, err)
		}
	}
	return nil
}

// AllowedRegistries are the hosts that untrusted references may name:
// [resolve] registries and the host of [resolve] registry.
func (r *Resolve) AllowedRegistries() []string {
	hosts := append([]string{}, r.Registries...)
	if host, _, ok := strings.Cut(r.Registry, "/"); ok && host != "" {
		hosts = append(hosts, host)
	}
	return hosts
}

// RegistryOptions are the registry client options the file sets
// ([resolve] plain_http, insecure and registry_config_path), for every
// command and the daemon that talk to a registry; the CLI's flags override
// them.
func (r *Resolve) RegistryOptions(userAgent string) registry.Options {
	return registry.Options{PlainHTTP: r.PlainHTTP.All, PlainHTTPHosts: r.PlainHTTP.Hosts, Insecure: r.Insecure, HostsDir: r.RegistryConfigPath, UserAgent: userAgent}
}

// SnapshotRoot is the snapshotter's directory: [snapshotter] root, or
// <root>/snapshots.
func (c *Config) SnapshotRoot(root string) string {
	if c.Snapshotter.Root != "" {
		return c.Snapshotter.Root
	}
	return filepath.Join(root, "snapshots")
}

// Encode is the configuration as a commented TOML file.
func (c *Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).EnableMarshalerInterface().Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
