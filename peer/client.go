package peer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
)

// ClientConfig is how a node talks to peers.
type ClientConfig struct {
	// Token is the bearer token presented on control connections.
	Token string
	// TLS, if set, secures control connections (with Certificates for mTLS).
	TLS *tls.Config
	// Timeout bounds every read, write and dial.
	Timeout time.Duration
	// ManifestMax bounds the manifest (and list) documents accepted.
	ManifestMax uint32
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ManifestMax == 0 {
		c.ManifestMax = DefaultManifestMax
	}
	return c
}

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
// and sends its hello; every later read and write has the timeout.
func (c ClientConfig) dial(ctx context.Context, addr string, op byte, secure bool) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: min(c.Timeout, dialTimeout), KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, &PeerError{Addr: addr, Err: err}
	}
	conn := net.Conn(raw)
	if secure && c.TLS != nil {
		cfg := c.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, c.Timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, nil, &PeerError{Addr: addr, Err: fmt.Errorf("TLS handshake: %w", err)}
		}
		conn = tc
	}
	dc := deadlineConn{conn, c.Timeout}
	tok := []byte(c.Token)
	if op == opRail {
		tok = nil
	}
	if _, err := dc.Write(hello{op: op, token: tok}.encode()); err != nil {
		conn.Close()
		return nil, nil, &PeerError{Addr: addr, Err: err}
	}
	return dc, bufio.NewReader(dc), nil
}

// List asks a peer what it holds.
func (c ClientConfig) List(ctx context.Context, addr string) (*Listing, error) {
	c = c.withDefaults()
	conn, r, err := c.dial(ctx, addr, opList, true)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ls, err := readListing(r, c.ManifestMax)
	if err != nil {
		return nil, &PeerError{Addr: addr, Err: err}
	}
	return ls, nil
}

// readListing reads the answer to list: a status, then [u32 len][JSON].
func readListing(r io.Reader, limit uint32) (*Listing, error) {
	if err := readStatus(r, "list"); err != nil {
		return nil, err
	}
	doc, err := readBlob32(r, limit, "list")
	if err != nil {
		return nil, err
	}
	var ls Listing
	if err := artifact.DecodeStrictJSON(bytes.NewReader(doc), &ls); err != nil {
		return nil, protoErr("list", "%v", err)
	}
	return &ls, nil
}

// clientSession is the client side of one session with one peer.
type clientSession struct {
	addr     string
	cfg      ClientConfig
	conn     net.Conn
	r        *bufio.Reader
	manifest *WeightManifest
	gen      [16]byte

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
func openSession(ctx context.Context, cfg ClientConfig, addr, request string) (*clientSession, error) {
	if len(request) > ModelRequestMax {
		return nil, &TooLargeError{What: "model request", Len: uint64(len(request)), Limit: ModelRequestMax}
	}
	conn, r, err := cfg.dial(ctx, addr, opFetch, true)
	if err != nil {
		return nil, err
	}
	cs := &clientSession{addr: addr, cfg: cfg, conn: conn, r: r}
	fail := func(err error) (*clientSession, error) {
		conn.Close()
		return nil, &PeerError{Addr: addr, Err: err}
	}
	if _, err := conn.Write(enc{}.blob32([]byte(request))); err != nil {
		return fail(err)
	}
	if err := readStatus(r, "model request"); err != nil {
		return fail(err)
	}
	if cs.manifest, err = readManifest(r, cfg.ManifestMax); err != nil {
		return fail(err)
	}
	if !cs.manifest.answers(request) {
		return fail(protoErr("manifest", "answers another request than %q", request))
	}
	if err := cs.manifest.checkPassthrough(); err != nil {
		return fail(err)
	}
	raw, _ := hex.DecodeString(cs.manifest.Generation)
	copy(cs.gen[:], raw)
	return cs, nil
}

// startPlane asks for the data plane and reads the rails' endpoints, then
// starts pinging the control connection.
func (cs *clientSession) startPlane(ctx context.Context, mode Mode, rails int) error {
	if _, err := cs.conn.Write(enc{mode.wire(), byte(min(max(rails, 1), MaxRails))}); err != nil {
		return &PeerError{Addr: cs.addr, Err: err}
	}
	if err := cs.readPlane(mode, rails); err != nil {
		return &PeerError{Addr: cs.addr, Err: err}
	}
	cs.stopPing, cs.pingDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cs.pingDone)
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				cs.wmu.Lock()
				_, err := cs.conn.Write([]byte{ctlPing})
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

// readPlane reads the transport answer: rails, secret, endpoints.
func (cs *clientSession) readPlane(mode Mode, asked int) error {
	if err := readStatus(cs.r, "transport"); err != nil {
		return err
	}
	n, err := readU8(cs.r, "rails")
	if err != nil {
		return err
	}
	if n == 0 || int(n) > max(asked, 1) {
		return protoErr("transport", "%d rails for %d asked", n, asked)
	}
	if err := readFull(cs.r, cs.secret[:], "session secret"); err != nil {
		return err
	}
	cs.mode, cs.rails = mode, int(n)
	cs.endpoints = make([][]byte, n)
	for i := range cs.endpoints {
		if cs.endpoints[i], err = readBlob16(cs.r, EndpointMax, "rail endpoint"); err != nil {
			return err
		}
	}
	return nil
}

// finish ends the session cleanly: done, and the peer's acknowledgement.
func (cs *clientSession) finish() error {
	cs.stopPinging()
	cs.wmu.Lock()
	_, err := cs.conn.Write([]byte{ctlDone})
	cs.wmu.Unlock()
	if err == nil {
		err = readStatus(cs.r, "done")
	}
	cs.conn.Close()
	if err != nil {
		return &PeerError{Addr: cs.addr, Err: err}
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
	ep, err := decodeTCPEndpoint(cs.endpoints[r])
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ep.host, strconv.Itoa(ep.port)), nil
}

// readKeys reads the rma key table: per rail, per shard, (base, key).
func (cs *clientSession) readKeys(shards int) ([][]remoteKey, error) {
	if err := readStatus(cs.r, "rma setup"); err != nil {
		return nil, &PeerError{Addr: cs.addr, Err: err}
	}
	keys, err := readKeyTable(cs.r, cs.rails, shards)
	if err != nil {
		return nil, &PeerError{Addr: cs.addr, Err: err}
	}
	return keys, nil
}
