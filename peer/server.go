package peer

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// Defaults of ServerConfig and ClientConfig. DefaultMaxChildren is 1: with
// one child per node the nodes form a chain in which every hop runs at the
// link's full rate, one piece behind its source, and TestFleetMaxChildren
// finds that faster than two children splitting each parent's uplink. A
// chain needs a small unit: with whole tensors or files each hop waits for
// a whole unit.
const (
	DefaultPort          = 7420
	DefaultTimeout       = 30 * time.Second
	DefaultMaxSessions   = 16
	DefaultMaxChildren   = 1
	DefaultMaxRails      = 16
	DefaultExportCeiling = 64 << 30
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Token, if set, is the bearer token every control connection must present.
	Token string
	// TLS, if set, is required on control connections (with ClientAuth and
	// ClientCAs for mTLS). Data-plane rails are authenticated by the
	// session's secret, which only travels on the control connection.
	TLS *tls.Config
	// MaxSessions bounds concurrent fetch sessions; more are answered busy.
	MaxSessions int
	// MaxChildren bounds the sessions of one artifact at once; more are
	// answered busy, so a child goes to another holder or builder.
	MaxChildren int
	// MaxRails bounds the rails of one session.
	MaxRails int
	// RailAddrs are local addresses rail r is served on (r modulo their
	// count), one per NIC; empty means the control connection's address.
	// The listener must accept connections on them.
	RailAddrs []string
	// Provider is the libfabric provider of the rma plane (verbs, efa, tcp,
	// sockets); "" lets libfabric choose.
	Provider string
	// Exports are the exported directories, and ExportCeiling the bytes
	// they may hold mapped at once.
	Exports       []Export
	ExportCeiling int64
	// Timeout bounds every read and write; a session whose client neither
	// pings nor finishes within it ends.
	Timeout time.Duration
	// ManifestMax bounds the manifest (and list) documents sent.
	ManifestMax uint32
}

func (c *ServerConfig) defaults() {
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxChildren <= 0 {
		c.MaxChildren = DefaultMaxChildren
	}
	if c.MaxRails <= 0 {
		c.MaxRails = DefaultMaxRails
	}
	c.MaxRails = min(c.MaxRails, wire.MaxRails)
	if c.ExportCeiling <= 0 {
		c.ExportCeiling = DefaultExportCeiling
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ManifestMax == 0 {
		c.ManifestMax = wire.DefaultManifestMax
	}
}

// Server serves one store domain to other nodes.
type Server struct {
	d       *store.Domain
	cfg     ServerConfig
	gen     string // generation id, hex
	genRaw  [16]byte
	exports *exportSet
	rma     error // why the rma plane is unavailable, nil when it is
	slots   chan struct{}
	active  atomic.Int64
	faults  faults // test builds only (faults_on.go)

	mu       sync.Mutex
	sessions map[[16]byte]*session
	children map[childKey]int // sessions per artifact, and per stripe of one
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewServer returns a server of the domain with a fresh generation id.
func NewServer(d *store.Domain, cfg ServerConfig) (*Server, error) {
	cfg.defaults()
	for _, a := range cfg.RailAddrs {
		if net.ParseIP(a) == nil {
			return nil, badInput("rail address %q is not an IP address", a)
		}
	}
	exports, err := newExportSet(cfg.Exports, cfg.ExportCeiling)
	if err != nil {
		return nil, err
	}
	s := &Server{d: d, cfg: cfg, exports: exports, slots: make(chan struct{}, cfg.MaxSessions),
		sessions: map[[16]byte]*session{}, children: map[childKey]int{}, conns: map[net.Conn]struct{}{}}
	s.faults = newFaults()
	rand.Read(s.genRaw[:])
	s.gen = hex.EncodeToString(s.genRaw[:])
	s.rma = probeRMA(cfg.Provider)
	return s, nil
}

// Generation is the server's generation id.
func (s *Server) Generation() string { return s.gen }

func (s *Server) modes() []Mode {
	if s.rma == nil {
		return []Mode{ModeTCP, ModeRMA}
	}
	return []Mode{ModeTCP}
}

// Serve accepts connections until ctx ends, one goroutine each, then closes
// every connection and waits for their sessions to end.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	release, err := s.d.Serving(ctx) // builds of the store announce their progress to this server
	if err != nil {
		return err
	}
	defer release()
	log.G(ctx).WithField("address", l.Addr().String()).WithField("generation", s.gen).WithField("modes", s.modes()).Info("peer: serving")
	if s.rma != nil && fabric.Built {
		log.G(ctx).WithError(s.rma).Warn("peer: the rma plane is unavailable")
	}
	for {
		var c net.Conn
		if c, err = l.Accept(); err != nil {
			break
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.handle(ctx, c); err != nil {
				log.G(ctx).WithError(err).WithField("remote", c.RemoteAddr().String()).Debug("peer: connection ended")
			}
		})
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// handshake is 0x16, the first byte of a TLS ClientHello; plain connections
// start with the magic.
const handshake = 0x16

// peekedConn reads through the buffered reader that peeked at its start.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (c peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (s *Server) handle(ctx context.Context, raw net.Conn) error {
	dc := wire.DeadlineConn{Conn: raw, Timeout: s.cfg.Timeout}
	br := bufio.NewReader(dc)
	first, err := br.Peek(1)
	if err != nil {
		return err
	}
	conn, r := net.Conn(dc), br
	secure := false
	if first[0] == handshake && s.cfg.TLS != nil {
		tc := tls.Server(peekedConn{raw, br}, s.cfg.TLS)
		hctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		conn, secure = wire.DeadlineConn{Conn: tc, Timeout: s.cfg.Timeout}, true
		r = bufio.NewReader(conn)
	}
	h, err := wire.ReadHello(r)
	if err != nil {
		conn.Write(wire.StatusFrame(wire.StatusBadRequest, err.Error()))
		return err
	}
	if h.Op == wire.OpRail {
		if secure {
			conn.Write(wire.StatusFrame(wire.StatusBadRequest, "rails are plain TCP: sendfile cannot write into TLS"))
			return errors.New("rail over TLS refused")
		}
		return s.serveRail(ctx, raw, r)
	}
	if s.cfg.TLS != nil && !secure {
		conn.Write(wire.StatusFrame(wire.StatusUnauthorized, "this peer requires TLS on the control connection"))
		return errors.New("plain control connection refused")
	}
	if s.cfg.Token != "" && subtle.ConstantTimeCompare(h.Token, []byte(s.cfg.Token)) != 1 {
		// The refused client is told what to give; nothing of the token is said.
		msg := "bearer token refused: this peer's token file holds another; give the one it holds with --token-file or [peer] token_file"
		if len(h.Token) == 0 {
			msg = "this peer requires a bearer token and none was presented: give its token file with --token-file or [peer] token_file"
		}
		conn.Write(wire.StatusFrame(wire.StatusUnauthorized, msg))
		return errors.New("bearer token refused")
	}
	if h.Op == wire.OpList {
		ls, err := s.listing(ctx)
		if err != nil {
			conn.Write(wire.StatusFrame(statusOf(err), err.Error()))
			return err
		}
		return s.sendDoc(conn, ls)
	}
	return s.serveSession(ctx, conn, r, raw.LocalAddr())
}

// sendDoc answers OK and a JSON document within the manifest bound.
func (s *Server) sendDoc(w io.Writer, v any) error {
	doc, err := json.Marshal(v)
	if err == nil && uint64(len(doc)) > uint64(s.cfg.ManifestMax) {
		err = fmt.Errorf("document of %d bytes is over the manifest bound of %d: %w", len(doc), s.cfg.ManifestMax, errdefs.ErrResourceExhausted)
	}
	if err != nil {
		w.Write(wire.StatusFrame(statusOf(err), err.Error()))
		return err
	}
	_, err = w.Write(wire.Enc{wire.StatusOK}.Blob32(doc))
	return err
}

// statusOf is the status code that answers err.
func statusOf(err error) byte {
	var stale *StaleGenerationError
	switch {
	case errors.As(err, &stale):
		return wire.StatusStale
	case errdefs.IsInvalidArgument(err):
		return wire.StatusBadRequest
	case errdefs.IsNotFound(err):
		return wire.StatusNotFound
	case errdefs.IsNotImplemented(err):
		return wire.StatusUnsupported
	case errdefs.IsResourceExhausted(err):
		return wire.StatusTooLarge
	case errdefs.IsUnavailable(err), errdefs.IsFailedPrecondition(err):
		return wire.StatusBusy
	}
	return wire.StatusInternal
}
