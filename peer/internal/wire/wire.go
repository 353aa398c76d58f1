package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"time"

	"github.com/containerd/errdefs"
)

// Limits of the wire format. Every length and count read from a peer is
// checked against one of these, as an unsigned number, before it is
// converted or anything is allocated for it.
const (
	// ModelRequestMax is the longest model request: an identity or manifest
	// digest, or an exported directory's staged id.
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
	// MaxPieceSize bounds a manifest's piece_size.
	MaxPieceSize = 1 << 30
	// MaxPieces bounds the pieces of one range request (a tensor of up
	// to 1 TiB in pieces of 1 MiB).
	MaxPieces = 1 << 20
)

// ExportPrefix marks a model request for an exported directory:
// staged:NAME, or staged:NAME/SUBDIR for a directory below it (such as a
// Hugging Face cache's models--org--name/snapshots/<commit>). The token
// "staged:" is the wire format's name for exported directories.
const ExportPrefix = "staged:"

// NameRE is a name on the wire: an exported directory's or a libfabric
// provider's.
var NameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

var hex32RE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// magic opens every connection: control and rail.
var magic = [4]byte{'W', 'S', 'P', '1'}

// Operations a connection opens with.
const (
	OpFetch byte = 1 // a session: request, manifest, transport, data plane
	OpList  byte = 2 // what the peer holds
	OpRail  byte = 3 // a tcp data-plane connection of a session
)

// Control messages of the client while the data plane runs.
const (
	CtlDone byte = 0
	CtlPing byte = 1
	// CtlUnit asks an rma session for the key of one unit whose shard has
	// none in the key table (a building artifact's): a UnitKeyRequest.
	CtlUnit byte = 2
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
	return "", fmt.Errorf("mode %q: want tcp or rma: %w", s, errdefs.ErrInvalidArgument)
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
	return "", Errorf("transport", "unknown mode byte %d", b)
}

// DeadlineConn sets a deadline before every read and write of a connection,
// so a peer that goes silent costs at most the timeout.
type DeadlineConn struct {
	net.Conn
	Timeout time.Duration
}

func (c DeadlineConn) Read(p []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.Timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c DeadlineConn) Write(p []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.Timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// ReadFull reads exactly len(p) bytes; a short stream is a truncated
// message: bad input, and a peer that hung up (io.ErrUnexpectedEOF), so a
// resolution passes over a peer that went away mid-answer as it does over
// one that is down.
func ReadFull(r io.Reader, p []byte, what string) error {
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w (%w)", Errorf(what, "truncated"), io.ErrUnexpectedEOF)
		}
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// ReadU8 reads one byte.
func ReadU8(r io.Reader, what string) (byte, error) {
	var b [1]byte
	err := ReadFull(r, b[:], what)
	return b[0], err
}

func readU16(r io.Reader, what string) (uint16, error) {
	var b [2]byte
	err := ReadFull(r, b[:], what)
	return binary.LittleEndian.Uint16(b[:]), err
}

func readU32(r io.Reader, what string) (uint32, error) {
	var b [4]byte
	err := ReadFull(r, b[:], what)
	return binary.LittleEndian.Uint32(b[:]), err
}

// ReadBlob32 reads [u32 len][bytes], refusing a length over limit before
// allocating anything.
func ReadBlob32(r io.Reader, limit uint32, what string) ([]byte, error) {
	n, err := readU32(r, what+" length")
	if err != nil {
		return nil, err
	}
	return readBlob(r, uint64(n), uint64(limit), what)
}

// readBlob16 reads [u16 len][bytes] with a limit, as ReadBlob32.
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
		return nil, tooLarge(what, n, limit)
	}
	b := make([]byte, int(n))
	return b, ReadFull(r, b, what)
}

// Enc builds a message; the sizes it writes were checked by the caller.
type Enc []byte

func (e Enc) U8(b byte) Enc       { return append(e, b) }
func (e Enc) U16(v uint16) Enc    { return binary.LittleEndian.AppendUint16(e, v) }
func (e Enc) U32(v uint32) Enc    { return binary.LittleEndian.AppendUint32(e, v) }
func (e Enc) U64(v uint64) Enc    { return binary.LittleEndian.AppendUint64(e, v) }
func (e Enc) Raw(b []byte) Enc    { return append(e, b...) }
func (e Enc) Blob16(b []byte) Enc { return e.U16(uint16(len(b))).Raw(b) }
func (e Enc) Blob32(b []byte) Enc { return e.U32(uint32(len(b))).Raw(b) }

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
