package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Limits of the wire format. Every length and count read from a peer is
// checked against one of these, as an unsigned number, before it is
// converted or anything is allocated for it.
const (
	// ModelRequestMax is the longest model request: an identity or manifest
	// digest, or a staged id.
	ModelRequestMax = 1024
	// TokenMax is the longest bearer token.
	TokenMax = 4096
	// MessageMax is the longest error message.
	MessageMax = 4096
	// DefaultManifestMax is the default bound of a WeightManifest (or list) document.
	DefaultManifestMax = 64 << 20
	// MaxRails is the most rails a session has.
	MaxRails = 64
	// EndpointMax is the longest per-rail endpoint parameter block.
	EndpointMax = 1024
	// MaxKeys bounds the rma key table of a session (rails times shards).
	MaxKeys = 1 << 20
)

// magic opens every connection: control and rail.
var magic = [4]byte{'W', 'S', 'P', '1'}

// Operations a connection opens with.
const (
	opFetch byte = 1 // a session: request, manifest, transport, data plane
	opList  byte = 2 // what the peer holds
	opRail  byte = 3 // a tcp data-plane connection of a session
)

// Control messages of the client while the data plane runs.
const (
	ctlDone byte = 0
	ctlPing byte = 1
)

// Transport modes, as sent on the wire.
const (
	modeTCP byte = 1
	modeRMA byte = 2
)

// Mode is a data plane: "tcp" or "rma".
type Mode string

// Data planes.
const (
	ModeTCP Mode = "tcp"
	ModeRMA Mode = "rma"
)

// ParseMode parses a data-plane name; "" is tcp.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeTCP:
		return ModeTCP, nil
	case ModeRMA:
		return ModeRMA, nil
	}
	return "", badInput("mode %q: want tcp or rma", s)
}

func (m Mode) wire() byte {
	if m == ModeRMA {
		return modeRMA
	}
	return modeTCP
}

func modeFromWire(b byte) (Mode, error) {
	switch b {
	case modeTCP:
		return ModeTCP, nil
	case modeRMA:
		return ModeRMA, nil
	}
	return "", protoErr("transport", "unknown mode byte %d", b)
}

// railsFromWire takes n_rails as at least 1 and at most limit.
func railsFromWire(b byte, limit int) int {
	return min(max(int(b), 1), limit, MaxRails)
}

// deadlineConn sets a deadline before every read and write of a connection,
// so a peer that goes silent costs at most the timeout.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c deadlineConn) Read(p []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c deadlineConn) Write(p []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// readFull reads exactly len(p) bytes; a short stream is a truncated message.
func readFull(r io.Reader, p []byte, what string) error {
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return protoErr(what, "truncated")
		}
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

func readU8(r io.Reader, what string) (byte, error) {
	var b [1]byte
	err := readFull(r, b[:], what)
	return b[0], err
}

func readU16(r io.Reader, what string) (uint16, error) {
	var b [2]byte
	err := readFull(r, b[:], what)
	return binary.LittleEndian.Uint16(b[:]), err
}

func readU32(r io.Reader, what string) (uint32, error) {
	var b [4]byte
	err := readFull(r, b[:], what)
	return binary.LittleEndian.Uint32(b[:]), err
}

func readU64(r io.Reader, what string) (uint64, error) {
	var b [8]byte
	err := readFull(r, b[:], what)
	return binary.LittleEndian.Uint64(b[:]), err
}

// readBlob32 reads [u32 len][bytes], refusing a length over limit before
// allocating anything.
func readBlob32(r io.Reader, limit uint32, what string) ([]byte, error) {
	n, err := readU32(r, what+" length")
	if err != nil {
		return nil, err
	}
	return readBlob(r, uint64(n), uint64(limit), what)
}

// readBlob16 reads [u16 len][bytes] with a limit, as readBlob32.
func readBlob16(r io.Reader, limit uint16, what string) ([]byte, error) {
	n, err := readU16(r, what+" length")
	if err != nil {
		return nil, err
	}
	return readBlob(r, uint64(n), uint64(limit), what)
}

// readBlob reads n bytes once n, as read from the wire, is within limit.
func readBlob(r io.Reader, n, limit uint64, what string) ([]byte, error) {
	if n > limit {
		return nil, &TooLargeError{What: what, Len: n, Limit: limit}
	}
	b := make([]byte, int(n))
	return b, readFull(r, b, what)
}

// enc builds a message; the sizes it writes were checked by the caller.
type enc []byte

func (e enc) u8(b byte) enc       { return append(e, b) }
func (e enc) u16(v uint16) enc    { return binary.LittleEndian.AppendUint16(e, v) }
func (e enc) u32(v uint32) enc    { return binary.LittleEndian.AppendUint32(e, v) }
func (e enc) u64(v uint64) enc    { return binary.LittleEndian.AppendUint64(e, v) }
func (e enc) raw(b []byte) enc    { return append(e, b...) }
func (e enc) blob16(b []byte) enc { return e.u16(uint16(len(b))).raw(b) }
func (e enc) blob32(b []byte) enc { return e.u32(uint32(len(b))).raw(b) }

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// hello is the first message of every connection.
type hello struct {
	op    byte
	token []byte
}

func (h hello) encode() enc {
	return enc(magic[:]).u8(h.op).blob16(h.token)
}

func readHello(r io.Reader) (hello, error) {
	var m [4]byte
	if err := readFull(r, m[:], "hello"); err != nil {
		return hello{}, err
	}
	if m != magic {
		return hello{}, protoErr("hello", "not a weight peer connection (magic %q)", m[:])
	}
	op, err := readU8(r, "hello op")
	if err != nil {
		return hello{}, err
	}
	if op != opFetch && op != opList && op != opRail {
		return hello{}, protoErr("hello", "unknown operation %d", op)
	}
	tok, err := readBlob16(r, TokenMax, "token")
	if err != nil {
		return hello{}, err
	}
	return hello{op: op, token: tok}, nil
}

// readRequest reads a model request: [u32 len][bytes], at most ModelRequestMax.
func readRequest(r io.Reader) (string, error) {
	b, err := readBlob32(r, ModelRequestMax, "model request")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Status codes of a server's answers.
const (
	stOK byte = iota
	stBadRequest
	stUnauthorized
	stNotFound
	stBusy
	stUnsupported
	stInternal
	stStale
	stTooLarge
	stCount // not a status: the number of them
)

// statusFrame encodes an answer: OK, or a code and a message.
func statusFrame(code byte, msg string) enc {
	if code == stOK {
		return enc{stOK}
	}
	if len(msg) > MessageMax {
		msg = msg[:MessageMax]
	}
	return enc{code}.blob32([]byte(msg))
}

// readStatus reads an answer's status; a failure becomes a *RemoteError.
func readStatus(r io.Reader, what string) error {
	code, err := readU8(r, what+" status")
	if err != nil {
		return err
	}
	if code == stOK {
		return nil
	}
	if code >= stCount {
		return protoErr(what, "unknown status %d", code)
	}
	msg, err := readBlob32(r, MessageMax, what+" error message")
	if err != nil {
		return err
	}
	return &RemoteError{Code: code, Message: string(msg)}
}

// tcpEndpoint is a tcp rail's endpoint parameters: where to dial.
type tcpEndpoint struct {
	host string
	port int
}

func encodeTCPEndpoint(host string, port int) []byte {
	return enc{}.u8(byte(len(host))).raw([]byte(host)).u16(uint16(port))
}

// decodeTCPEndpoint parses [u8 len][host][u16 port].
func decodeTCPEndpoint(b []byte) (tcpEndpoint, error) {
	if len(b) < 1 || len(b) != 1+int(b[0])+2 {
		return tcpEndpoint{}, protoErr("tcp endpoint", "%d bytes do not hold a host and a port", len(b))
	}
	n := 1 + int(b[0])
	host := string(b[1:n])
	if net.ParseIP(host) == nil {
		return tcpEndpoint{}, protoErr("tcp endpoint", "host %q is not an IP address", host)
	}
	return tcpEndpoint{host: host, port: int(binary.LittleEndian.Uint16(b[n:]))}, nil
}

// rmaEndpoint is an rma rail's endpoint parameters: the libfabric provider
// and the passive endpoint to connect to.
type rmaEndpoint struct {
	provider, host string
	port           int
}

func encodeRMAEndpoint(provider, host string, port int) []byte {
	return enc{}.u8(byte(len(provider))).raw([]byte(provider)).u8(byte(len(host))).raw([]byte(host)).u16(uint16(port))
}

// decodeRMAEndpoint parses [u8 len][provider][u8 len][host][u16 port].
func decodeRMAEndpoint(b []byte) (rmaEndpoint, error) {
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return rmaEndpoint{}, protoErr("rma endpoint", "%d bytes do not hold a provider, a host and a port", len(b))
	}
	n := 1 + int(b[0])
	prov, rest := string(b[1:n]), b[n:]
	tcp, err := decodeTCPEndpoint(rest)
	if err != nil {
		return rmaEndpoint{}, err
	}
	if prov == "" || !stagedNameRE.MatchString(prov) {
		return rmaEndpoint{}, protoErr("rma endpoint", "provider %q", prov)
	}
	return rmaEndpoint{provider: prov, host: tcp.host, port: tcp.port}, nil
}

// remoteKey is where one shard lies for one rail: its base address and key.
type remoteKey struct{ base, key uint64 }

// encodeKeyTable encodes [u32 count] and count (base, key) pairs, rail by
// rail, shard by shard.
func encodeKeyTable(keys [][]remoteKey) []byte {
	n := 0
	for _, r := range keys {
		n += len(r)
	}
	e := enc{}.u32(uint32(n))
	for _, r := range keys {
		for _, k := range r {
			e = e.u64(k.base).u64(k.key)
		}
	}
	return e
}

// readKeyTable reads the key table of rails x shards entries; any other
// count is refused before anything is allocated.
func readKeyTable(r io.Reader, rails, shards int) ([][]remoteKey, error) {
	n, err := readU32(r, "key table count")
	if err != nil {
		return nil, err
	}
	if uint64(n) > MaxKeys || uint64(n) != uint64(rails)*uint64(shards) {
		return nil, protoErr("key table", "%d entries for %d rails of %d shards", n, rails, shards)
	}
	keys := make([][]remoteKey, rails)
	for i := range keys {
		keys[i] = make([]remoteKey, shards)
		for j := range keys[i] {
			var b [16]byte
			if err := readFull(r, b[:], "key table"); err != nil {
				return nil, err
			}
			keys[i][j] = remoteKey{base: le64(b[:8]), key: le64(b[8:])}
		}
	}
	return keys, nil
}
