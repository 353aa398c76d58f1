package peer

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"golang.org/x/sys/unix"
)

// session is the server side of one fetch: what it serves, its data plane
// and the rail connections attached to it.
type session struct {
	secret [16]byte
	sv     *servable
	mode   Mode
	rails  int
	// stripe is the stripe a striped session serves (the zero Stripe: the
	// whole artifact), and order the artifact's piece order it is dealt from.
	stripe wire.Stripe
	order  *pieceOrder

	mu        sync.Mutex
	closed    bool
	railConns map[net.Conn]struct{}
	wg        sync.WaitGroup
}

// attach adds a rail connection; false once the session ended.
func (ss *session) attach(c net.Conn) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	ss.railConns[c] = struct{}{}
	ss.wg.Add(1)
	return true
}

func (ss *session) detach(c net.Conn) {
	ss.mu.Lock()
	delete(ss.railConns, c)
	ss.mu.Unlock()
	ss.wg.Done()
}

// end closes the rails and waits until none uses the session's shards.
func (ss *session) end() {
	ss.mu.Lock()
	ss.closed = true
	for c := range ss.railConns {
		c.Close()
	}
	ss.mu.Unlock()
	ss.wg.Wait()
}

// servePlane is the server side of a session's data plane.
type servePlane interface {
	// endpoints are the per-rail parameters the client connects with.
	endpoints() [][]byte
	// ready finishes the setup once the client has the endpoints: the rma
	// plane accepts every rail and registers the shards, returning the key
	// table; the tcp plane has nothing to add.
	ready(ctx context.Context) ([]byte, error)
	// unit answers a CtlUnit: the rma plane registers the range on the
	// rail once it is verified; the tcp plane has no keys.
	unit(ctx context.Context, q wire.UnitKeyRequest) (wire.RemoteKey, error)
	close()
}

// railHosts are the addresses rails are served on.
func (s *Server) railHosts(local net.Addr, n int) []string {
	host, _, _ := net.SplitHostPort(local.String())
	hosts := make([]string, n)
	for r := range hosts {
		hosts[r] = host
		if len(s.cfg.RailAddrs) > 0 {
			hosts[r] = s.cfg.RailAddrs[r%len(s.cfg.RailAddrs)]
		}
	}
	return hosts
}

func (s *Server) serveSession(ctx context.Context, conn net.Conn, r *bufio.Reader, local net.Addr) error {
	fail := func(err error) error {
		conn.Write(wire.StatusFrame(statusOf(err), err.Error()))
		return err
	}
	raw, err := wire.ReadRequest(r)
	if err != nil {
		return fail(err)
	}
	req, err := wire.ParseRequest(raw) // the one parse of the request
	if err != nil {
		return fail(err)
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return fail(&wire.RemoteError{Code: wire.StatusBusy, Message: fmt.Sprintf("busy: %d sessions, the most this peer serves at once", s.cfg.MaxSessions)})
	}
	defer func() { <-s.slots }()
	s.active.Add(1)
	defer s.active.Add(-1)
	sv, err := s.open(ctx, req)
	if err != nil {
		return fail(err)
	}
	defer sv.release()
	children := []childKey{{id: sv.manifest.ID, stripe: req.Stripe}}
	if req.Slow && req.Stripe.Count > 0 {
		children = append(children, childKey{id: sv.manifest.ID, stripe: req.Stripe, slow: true})
	}
	for _, k := range children {
		if !s.addChild(k) {
			return fail(s.busyChildren(k))
		}
		defer s.dropChild(k)
	}
	m := sv.manifest
	m.Generation = s.gen
	m.PieceSize = blake3.PieceSize
	if req.Export == "" {
		m.Records = s.records(ctx, m.ID)
	}
	if err := s.sendDoc(conn, &m); err != nil {
		return err
	}
	tr, err := wire.ReadTransportRequest(r, s.cfg.MaxRails)
	if err != nil {
		return fail(err)
	}
	mode := tr.Mode
	ss := &session{sv: sv, mode: mode, rails: tr.Rails, railConns: map[net.Conn]struct{}{}, stripe: req.Stripe}
	if req.Stripe.Count > 0 {
		if mode != ModeTCP {
			return fail(badInput("stripe %s of %s on the %s plane: a stripe is served on the tcp plane only", req.Stripe, m.ID.Short(), mode))
		}
		ss.order = newPieceOrder(&m)
	}
	rand.Read(ss.secret[:])
	hosts := s.railHosts(local, ss.rails)
	var plane servePlane = tcpServePlane{hosts: hosts, port: local.(*net.TCPAddr).Port}
	if mode == ModeRMA {
		if s.rma != nil {
			return fail(s.rma)
		}
		if plane, err = newRMAServePlane(s.cfg.Provider, ss, hosts, s.cfg.Timeout); err != nil {
			return fail(err)
		}
	}
	defer plane.close()
	s.mu.Lock()
	s.sessions[ss.secret] = ss
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, ss.secret)
		s.mu.Unlock()
		ss.end()
	}()
	if _, err := conn.Write(wire.TransportAnswer{Secret: ss.secret, Endpoints: plane.endpoints()}.Encode()); err != nil {
		return err
	}
	keys, err := plane.ready(ctx)
	if err != nil {
		return fail(err)
	}
	if keys != nil {
		if _, err := conn.Write(wire.Enc{wire.StatusOK}.Raw(keys)); err != nil {
			return err
		}
	}
	log.G(ctx).WithField("id", m.ID).WithField("mode", mode).WithField("rails", ss.rails).
		WithField("remote", conn.RemoteAddr().String()).Info("peer: session started")
	for {
		b, err := wire.ReadU8(r, "control")
		if err != nil {
			return err
		}
		switch b {
		case wire.CtlPing:
		case wire.CtlUnit:
			q, err := wire.ReadUnitKeyRequest(r)
			if err != nil {
				return fail(err)
			}
			k, err := plane.unit(ctx, q)
			if err != nil {
				return fail(err)
			}
			if _, err := conn.Write(k.Encode()); err != nil {
				return err
			}
		case wire.CtlDone:
			_, err := conn.Write(wire.StatusFrame(wire.StatusOK, ""))
			return err
		default:
			return fail(wire.Errorf("control", "unknown message %d", b))
		}
	}
}

// childKey is what a server counts sessions by: an artifact, or one
// stripe of it, or the sessions of one stripe that took it over from a
// slow source (counted in the stripe's too).
type childKey struct {
	id     artifact.ID
	stripe wire.Stripe
	slow   bool
}

// maxSlowChildren is how many sessions of one stripe that took it over
// from a slow source a server serves at once: an adopter's own children
// keep their share of its uplink.
const maxSlowChildren = 1

// childLimit is how many sessions of k the server serves at once:
// MaxChildren of the whole artifact; of a stripe, twice its stripe count:
// the most the striped forest places on one member of one stripe, and as
// many orphans it may adopt; of those that left a slow source,
// maxSlowChildren.
func (s *Server) childLimit(k childKey) int {
	switch {
	case k.slow:
		return maxSlowChildren
	case k.stripe.Count > 0:
		return 2 * k.stripe.Count
	}
	return s.cfg.MaxChildren
}

// addChild counts a session of k; false when it has childLimit sessions
// already.
func (s *Server) addChild(k childKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.children[k] >= s.childLimit(k) {
		return false
	}
	s.children[k]++
	return true
}

func (s *Server) dropChild(k childKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.children[k]--; s.children[k] <= 0 {
		delete(s.children, k)
	}
}

// busyChildren is the answer to a session past childLimit.
func (s *Server) busyChildren(k childKey) error {
	switch {
	case k.slow:
		return &wire.RemoteError{Code: wire.StatusBusy, Message: fmt.Sprintf("busy: %d sessions of stripe %s of %s taken over from a slow source, the most this peer serves", s.childLimit(k), k.stripe, k.id.Short())}
	case k.stripe.Count > 0:
		return &wire.RemoteError{Code: wire.StatusBusy, Message: fmt.Sprintf("busy: %d sessions of stripe %s of %s, the most this peer serves of one stripe", s.childLimit(k), k.stripe, k.id.Short())}
	}
	return &wire.RemoteError{Code: wire.StatusBusy, Message: fmt.Sprintf("busy: %d sessions of %s, the most this peer serves of one artifact", s.cfg.MaxChildren, k.id.Short())}
}

// tcpServePlane serves rails on the server's own listener.
type tcpServePlane struct {
	hosts []string
	port  int
}

func (p tcpServePlane) endpoints() [][]byte {
	out := make([][]byte, len(p.hosts))
	for r, h := range p.hosts {
		out[r] = wire.EncodeTCPEndpoint(h, p.port)
	}
	return out
}

func (tcpServePlane) ready(context.Context) ([]byte, error) { return nil, nil }
func (tcpServePlane) close()                                {}

func (tcpServePlane) unit(context.Context, wire.UnitKeyRequest) (wire.RemoteKey, error) {
	return wire.RemoteKey{}, badInput("a tcp session has no unit keys")
}

// checkRange refuses a range of no shard, or past its shard's end.
func (sv *servable) checkRange(q wire.RangeRequest) error {
	if uint64(q.Shard) >= uint64(len(sv.shards)) {
		return badInput("shard %d of %d", q.Shard, len(sv.shards))
	}
	sh := sv.shards[q.Shard]
	if size := uint64(sh.entry.Size); q.Off > size || q.N > size-q.Off {
		return badInput("range %d+%d past the end of %s", q.Off, q.N, sh.entry.Path)
	}
	return nil
}

// checkRange refuses a range the servable refuses and, of a striped
// session, a range of bytes that is not within one piece of its stripe (a
// range for pieces' chaining values may be any unit).
func (ss *session) checkRange(q wire.RangeRequest) error {
	if err := ss.sv.checkRange(q); err != nil || ss.order == nil || q.Pieces {
		return err
	}
	p, ok := ss.order.piece(int(q.Shard), int64(q.Off), int64(q.N))
	if !ok || !ss.stripe.Has(p) {
		return badInput("range %d+%d of shard %d is not one piece of stripe %s", q.Off, q.N, q.Shard, ss.stripe)
	}
	return nil
}

// serveRail serves one tcp rail: ranged reads of the session's shards,
// each answered by a status byte and the bytes, sent with sendfile.
func (s *Server) serveRail(ctx context.Context, raw net.Conn, r *bufio.Reader) error {
	conn := wire.DeadlineConn{Conn: raw, Timeout: s.cfg.Timeout}
	a, err := wire.ReadRailAttach(r)
	if err != nil {
		return err
	}
	if a.Generation != s.genRaw {
		err := &StaleGenerationError{Addr: raw.LocalAddr().String(), Want: fmt.Sprintf("%x", a.Generation), Got: s.gen}
		conn.Write(wire.StatusFrame(wire.StatusStale, err.Error()))
		return err
	}
	s.mu.Lock()
	ss := s.sessions[a.Secret]
	s.mu.Unlock()
	if ss == nil || ss.mode != ModeTCP || int(a.Rail) >= ss.rails || !ss.attach(raw) {
		conn.Write(wire.StatusFrame(wire.StatusNotFound, "no such tcp session or rail"))
		return errors.New("rail for no session")
	}
	defer ss.detach(raw)
	if _, err := conn.Write(wire.StatusFrame(wire.StatusOK, "")); err != nil {
		return err
	}
	for {
		q, err := wire.ReadRangeRequest(r)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.checkRange(q); err != nil {
			conn.Write(wire.StatusFrame(wire.StatusBadRequest, err.Error()))
			return err
		}
		sh := ss.sv.shards[q.Shard]
		if q.Pieces {
			cvs, err := ss.sv.pieceCVs(ctx, int(q.Shard), int64(q.Off), int64(q.N), s.cfg.Timeout)
			if err != nil {
				conn.Write(wire.StatusFrame(statusOf(err), err.Error()))
				return fmt.Errorf("pieces of %s: %w", sh.entry.Path, err)
			}
			if _, err := conn.Write(wire.EncodePieceCVs(cvs)); err != nil {
				return err
			}
			continue
		}
		asked := time.Now()
		f, err := ss.sv.rangeFile(ctx, int(q.Shard), int64(q.Off), int64(q.N), s.cfg.Timeout)
		if err != nil {
			conn.Write(wire.StatusFrame(statusOf(err), err.Error()))
			return fmt.Errorf("range of %s: %w", sh.entry.Path, err)
		}
		log.G(ctx).WithField("remote", raw.RemoteAddr().String()).WithField("file", sh.entry.Path).WithField("offset", q.Off).
			WithField("waited", time.Since(asked).Round(time.Millisecond)).Debug("peer: range ready to send")
		if _, err := conn.Write(wire.StatusFrame(wire.StatusOK, "")); err != nil {
			return err
		}
		if err := s.faults.sender(ctx, sh.entry.Path)(raw, f, int64(q.Off), int64(q.N), s.cfg.Timeout); err != nil {
			return fmt.Errorf("send %s: %w", sh.entry.Path, err)
		}
	}
}

// sendWindow is how much of a range sendRange asks the kernel to read
// ahead of what it sends: a file not in the page cache is then read from
// disk in large asynchronous requests while the previous window is sent,
// not a readahead window at a time, which leaves a cold disk idle between
// requests.
const sendWindow = 32 << 20

// sendRange sends n bytes of f from off with sendfile, never moving the
// file's offset (rails share the descriptor), each window asked of the
// kernel before the previous one is sent; every wait has the timeout.
func sendRange(c net.Conn, f *os.File, off, n int64, timeout time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("sendfile needs a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	src := int(f.Fd())
	end := off + n
	asked := off // the kernel has been asked to read ahead up to here
	for n > 0 {
		for asked < min(end, off+2*sendWindow) {
			k := min(end-asked, sendWindow)
			unix.Fadvise(src, asked, k, unix.FADV_WILLNEED) // a hint: its failure costs only speed
			asked += k
		}
		if err := tc.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
			return err
		}
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			w, e := unix.Sendfile(int(fd), src, &off, int(min(n, sendWindow)))
			switch {
			case e == unix.EAGAIN, e == unix.EINTR:
				return false
			case e != nil:
				serr = e
			case w == 0:
				serr = io.ErrUnexpectedEOF // the file is shorter than it was
			default:
				n -= int64(w)
			}
			return true
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
