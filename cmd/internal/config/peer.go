package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"github.com/weightsnap/weightsnap/peer"
)

// Unauthenticated says whether the peer would listen beyond loopback with
// neither a token nor client certificates to check: any host that reaches
// the port could read every artifact.
func (p Peer) Unauthenticated() bool {
	if p.TokenFile != "" || p.TLSClientCA != "" {
		return false
	}
	host, _, err := net.SplitHostPort(p.Listen)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// Self is the address other nodes reach this node's peer at: advertise,
// else listen unless its host is a wildcard, loopback (a node alone: its
// peers do not list it so) or a name; "" when unknown.
func (p Peer) Self() string {
	if p.Advertise != "" {
		return p.Advertise
	}
	host, _, err := net.SplitHostPort(p.Listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
		return ""
	}
	return p.Listen
}

// ServerConfig is the weight peer server the [peer] table describes. A
// peer listening beyond loopback with neither a token nor mTLS is refused
// unless allow_unauthenticated says so.
func (p Peer) ServerConfig() (peer.ServerConfig, error) {
	if p.Unauthenticated() && !p.AllowUnauthenticated {
		return peer.ServerConfig{}, fmt.Errorf("[peer] listen %q reaches beyond loopback with neither token_file nor tls_client_ca, so any host that reaches it could read every artifact: set token_file, or tls_cert, tls_key and tls_client_ca, or allow_unauthenticated = true (--allow-unauthenticated): %w",
			p.Listen, errdefs.ErrInvalidArgument)
	}
	cfg := peer.ServerConfig{MaxSessions: p.MaxSessions, MaxChildren: p.MaxChildren, MaxRails: p.MaxRails, RailAddrs: p.RailAddrs,
		Provider: p.FabricProvider, Exports: p.Exports, ExportCeiling: p.ExportCeilingBytes,
		Timeout: time.Duration(p.TimeoutSeconds) * time.Second}
	var err error
	if cfg.Token, err = p.token(); err != nil {
		return cfg, err
	}
	certs, err := p.certificates()
	if err != nil || certs == nil {
		return cfg, err
	}
	cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs}
	if p.TLSClientCA != "" {
		if cfg.TLS.ClientCAs, err = certPool(p.TLSClientCA); err != nil {
			return cfg, err
		}
		cfg.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig is how this node talks to other peers, as the [peer] table says.
func (p Peer) ClientConfig() (peer.ClientConfig, error) {
	c := peer.ClientConfig{Timeout: time.Duration(p.TimeoutSeconds) * time.Second, ConnectTimeout: time.Duration(p.ConnectTimeoutSeconds) * time.Second,
		Congestion: p.TCPCongestion}
	var err error
	if c.Token, err = p.token(); err != nil || p.TLSCA == "" {
		return c, err
	}
	c.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	if c.TLS.RootCAs, err = certPool(p.TLSCA); err != nil {
		return c, err
	}
	c.TLS.Certificates, err = p.certificates()
	return c, err
}

// FetchOptions are the fetch defaults of the [peer] table.
func (p Peer) FetchOptions() (peer.FetchOptions, error) {
	mode, err := peer.ParseMode(p.Mode)
	if err != nil {
		return peer.FetchOptions{}, err
	}
	structure, err := peer.ParseStructure(p.Structure)
	if err != nil {
		return peer.FetchOptions{}, err
	}
	c, err := p.ClientConfig()
	return peer.FetchOptions{Client: c, Mode: mode, Rails: p.Rails, Structure: structure}, err
}

// SlowAfter is the striped fetch's slow-source window (peer.Provider's
// SlowAfter), slow_source_seconds; 0 leaves every stripe with its source.
func (p Peer) SlowAfter() time.Duration {
	return time.Duration(p.SlowSourceSeconds) * time.Second
}

func (p Peer) token() (string, error) {
	if p.TokenFile == "" {
		return "", nil
	}
	raw, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return "", fmt.Errorf("[peer] token file: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

func (p Peer) certificates() ([]tls.Certificate, error) {
	if p.TLSCert == "" && p.TLSKey == "" {
		return nil, nil
	}
	c, err := tls.LoadX509KeyPair(p.TLSCert, p.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("[peer] TLS certificate: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return []tls.Certificate{c}, nil
}

func certPool(file string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("[peer] CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("[peer] CA file %s holds no PEM certificate: %w", file, errdefs.ErrInvalidArgument)
	}
	return pool, nil
}

// foldAliases moves the keys read under their first names ([[peer.staged]],
// staged_ceiling_bytes) to their names (exports, export_ceiling_bytes). A
// file, raw, naming one setting under both names is refused.
func (p *Peer) foldAliases(raw []byte) error {
	if p.StagedAlias == nil && p.StagedCeilingAlias == nil {
		return nil
	}
	var named struct {
		Peer struct {
			Exports *[]peer.Export `toml:"exports"`
			Ceiling *int64         `toml:"export_ceiling_bytes"`
		} `toml:"peer"`
	}
	if err := toml.Unmarshal(raw, &named); err != nil {
		return fmt.Errorf("[peer]: %w", errors.Join(errdefs.ErrInvalidArgument, err))
	}
	if p.StagedAlias != nil {
		if named.Peer.Exports != nil {
			return fmt.Errorf("[peer] exports and staged (its first name) are both set: keep exports: %w", errdefs.ErrInvalidArgument)
		}
		p.Exports, p.StagedAlias = p.StagedAlias, nil
	}
	if p.StagedCeilingAlias != nil {
		if named.Peer.Ceiling != nil {
			return fmt.Errorf("[peer] export_ceiling_bytes and staged_ceiling_bytes (its first name) are both set: keep export_ceiling_bytes: %w", errdefs.ErrInvalidArgument)
		}
		p.ExportCeilingBytes, p.StagedCeilingAlias = *p.StagedCeilingAlias, nil
	}
	return nil
}
