package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// ClientConfig is how a node talks to peers.
type ClientConfig struct {
	// Token is the bearer token presented on control connections.
	Token string
	// TLS, if set, secures control connections (with Certificates for mTLS).
	TLS *tls.Config
	// Timeout bounds every read and write.
	Timeout time.Duration
	// ConnectTimeout bounds reaching a peer: the dial, the TLS handshake
	// and, on a control connection, the wait for the peer's first answer,
	// so a peer that is down or black-holed (it accepts and never answers)
	// costs seconds before resolution asks the next source. 0 means
	// DefaultConnectTimeout; never more than Timeout.
	ConnectTimeout time.Duration
	// ManifestMax bounds the manifest (and list) documents accepted.
	ManifestMax uint32
	// Congestion is the TCP congestion control algorithm of the
	// connections the node opens (TCP_CONGESTION); "" keeps the host's.
	Congestion string
	// Down remembers the peers that failed to answer, so a source choice
	// passes over them for a while; nil remembers nothing beyond one fetch.
	Down *DownPeers
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ManifestMax == 0 {
		c.ManifestMax = wire.DefaultManifestMax
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	c.ConnectTimeout = min(c.ConnectTimeout, c.Timeout)
	return c
}

// DefaultConnectTimeout is how long a node waits to reach a peer (its
// dial, TLS handshake and first answer) when the configuration does not
// say: a peer on the node's network answers in milliseconds, so this is
// the price of one that is down or black-holed.
const DefaultConnectTimeout = 5 * time.Second

// dialTimeout bounds a dial, and an rma rail's connect and accept, below
// the read and write timeout: an unreachable peer of a list should not hold
// up the next one for long, and a connect request the fabric lost should
// leave the fetch time for another session within its patience (the
// sockets provider once left one unanswered for the whole 30 s).
const dialTimeout = 10 * time.Second

// pingEvery is how often a client tells the peer's control connection it is
// still there while the data plane runs.
const pingEvery = 5 * time.Second

// dial opens a connection to a peer (TLS where configured and tls is true)
// and sends its hello; every later read and write has the timeout, except
// that on a control connection (not a rail, whose first bytes may wait on
// a builder's source) the peer's first answer must come within the
// connect timeout.
func (c ClientConfig) dial(ctx context.Context, addr string, op byte, secure bool) (net.Conn, *bufio.Reader, error) {
	c = c.withDefaults()
	d := net.Dialer{Timeout: min(c.ConnectTimeout, dialTimeout), KeepAlive: 15 * time.Second, Control: congestionControl(c.Congestion)}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, &Error{Addr: addr, Err: err}
	}
	conn := net.Conn(raw)
	if secure && c.TLS != nil {
		cfg := c.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, nil, &Error{Addr: addr, Err: fmt.Errorf("TLS handshake: %w", err)}
		}
		conn = tc
	}
	dc := &answerConn{Conn: conn, timeout: c.Timeout, first: c.ConnectTimeout}
	tok := []byte(c.Token)
	if op == wire.OpRail {
		tok, dc.first = nil, c.Timeout
	}
	if _, err := dc.Write(wire.Hello{Op: op, Token: tok}.Encode()); err != nil {
		conn.Close()
		return nil, nil, &Error{Addr: addr, Err: err}
	}
	return dc, bufio.NewReader(dc), nil
}

// answerConn sets a deadline before every read and write of a connection
// (wire.DeadlineConn), the read's first until the peer's first byte came.
type answerConn struct {
	net.Conn
	timeout, first time.Duration
	answered       atomic.Bool
}

// SyscallConn is the connection's own where it is plain TCP.
func (c *answerConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (c *answerConn) Read(p []byte) (int, error) {
	t := c.timeout
	if !c.answered.Load() {
		t = c.first
	}
	if err := c.SetReadDeadline(time.Now().Add(t)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

func (c *answerConn) Write(p []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// List asks a peer what it holds.
func (c ClientConfig) List(ctx context.Context, addr string) (*wire.Listing, error) {
	ls, err := c.list(ctx, addr)
	c.Down.note(ctx, addr, err)
	return ls, err
}

func (c ClientConfig) list(ctx context.Context, addr string) (*wire.Listing, error) {
	c = c.withDefaults()
	conn, r, err := c.dial(ctx, addr, wire.OpList, true)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ls, err := wire.ReadListing(r, c.ManifestMax)
	if err != nil {
		return nil, &Error{Addr: addr, Err: err}
	}
	return ls, nil
}

// clientSession is the client side of one session with one peer.
type clientSession struct {
	addr     string
	cfg      ClientConfig
	conn     net.Conn
	r        *bufio.Reader
	manifest *wire.WeightManifest
	gen      [16]byte
	stripe   wire.Stripe // the request's: a striped session's rails ask for its pieces only

	// Set by startPlane.
	mode      Mode
	rails     int
	secret    [16]byte
	endpoints [][]byte

	wmu      sync.Mutex // control writes: pings and done
	stopPing chan struct{}
	pingDone chan struct{}
}

// openSession asks addr for request and reads the manifest.
func openSession(ctx context.Context, cfg ClientConfig, addr string, request wire.Request) (*clientSession, error) {
	cs, err := askManifest(ctx, cfg, addr, request)
	cfg.Down.note(ctx, addr, err)
	return cs, err
}

func askManifest(ctx context.Context, cfg ClientConfig, addr string, request wire.Request) (*clientSession, error) {
	req, err := wire.EncodeRequest(request)
	if err != nil {
		return nil, err
	}
	conn, r, err := cfg.dial(ctx, addr, wire.OpFetch, true)
	if err != nil {
		return nil, err
	}
	cs := &clientSession{addr: addr, cfg: cfg, conn: conn, r: r, stripe: request.Stripe}
	fail := func(err error) (*clientSession, error) {
		conn.Close()
		return nil, &Error{Addr: addr, Err: err}
	}
	if _, err := conn.Write(req); err != nil {
		return fail(err)
	}
	if err := wire.ReadStatus(r, "model request"); err != nil {
		return fail(err)
	}
	if cs.manifest, err = wire.ReadManifest(r, cfg.ManifestMax); err != nil {
		return fail(err)
	}
	if !cs.manifest.Answers(request) {
		return fail(wire.Errorf("manifest", "answers another request than %q", request.String()))
	}
	if err := cs.manifest.CheckPassthrough(); err != nil {
		return fail(err)
	}
	raw, _ := hex.DecodeString(cs.manifest.Generation)
	copy(cs.gen[:], raw)
	return cs, nil
}

// startPlane asks for the data plane and reads the rails' endpoints, then
// starts pinging the control connection.
func (cs *clientSession) startPlane(ctx context.Context, mode Mode, rails int) error {
	if _, err := cs.conn.Write(wire.TransportRequest{Mode: mode, Rails: rails}.Encode()); err != nil {
		return &Error{Addr: cs.addr, Err: err}
	}
	a, err := wire.ReadTransportAnswer(cs.r, rails)
	if err != nil {
		return &Error{Addr: cs.addr, Err: err}
	}
	cs.mode, cs.rails, cs.secret, cs.endpoints = mode, len(a.Endpoints), a.Secret, a.Endpoints
	cs.stopPing, cs.pingDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cs.pingDone)
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				cs.wmu.Lock()
				_, err := cs.conn.Write([]byte{wire.CtlPing})
				cs.wmu.Unlock()
				if err != nil {
					return
				}
			case <-cs.stopPing:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// finish ends the session cleanly: done, and the peer's acknowledgement.
func (cs *clientSession) finish() error {
	cs.stopPinging()
	cs.wmu.Lock()
	_, err := cs.conn.Write([]byte{wire.CtlDone})
	cs.wmu.Unlock()
	if err == nil {
		err = wire.ReadStatus(cs.r, "done")
	}
	cs.conn.Close()
	if err != nil {
		return &Error{Addr: cs.addr, Err: err}
	}
	return nil
}

func (cs *clientSession) stopPinging() {
	if cs.stopPing != nil {
		close(cs.stopPing)
		<-cs.pingDone
		cs.stopPing = nil
	}
}

// close drops the session without ceremony.
func (cs *clientSession) close() {
	cs.stopPinging()
	cs.conn.Close()
}

// railAddr is where rail r of a tcp session dials.
func (cs *clientSession) railAddr(r int) (string, error) {
	ep, err := wire.DecodeTCPEndpoint(cs.endpoints[r])
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port)), nil
}

// readKeys reads the rma key table: per rail, per shard, (base, key).
func (cs *clientSession) readKeys(shards int) ([][]wire.RemoteKey, error) {
	if err := wire.ReadStatus(cs.r, "rma setup"); err != nil {
		return nil, &Error{Addr: cs.addr, Err: err}
	}
	keys, err := wire.ReadKeyTable(cs.r, cs.rails, shards)
	if err != nil {
		return nil, &Error{Addr: cs.addr, Err: err}
	}
	return keys, nil
}
