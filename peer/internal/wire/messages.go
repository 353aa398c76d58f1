package wire

import (
	"encoding/binary"
	"io"
	"net"
)

// Hello is the first message of every connection.
type Hello struct {
	Op    byte
	Token []byte
}

// Encode encodes the hello.
func (h Hello) Encode() Enc {
	return Enc(magic[:]).U8(h.Op).Blob16(h.Token)
}

// ReadHello reads a hello: the magic, a known operation and a bounded token.
func ReadHello(r io.Reader) (Hello, error) {
	var m [4]byte
	if err := ReadFull(r, m[:], "hello"); err != nil {
		return Hello{}, err
	}
	if m != magic {
		return Hello{}, Errorf("hello", "not a weight peer connection (magic %q)", m[:])
	}
	op, err := ReadU8(r, "hello op")
	if err != nil {
		return Hello{}, err
	}
	if op != OpFetch && op != OpList && op != OpRail {
		return Hello{}, Errorf("hello", "unknown operation %d", op)
	}
	tok, err := readBlob16(r, TokenMax, "token")
	if err != nil {
		return Hello{}, err
	}
	return Hello{Op: op, Token: tok}, nil
}

// EncodeRequest encodes a model request, refusing one over ModelRequestMax.
func EncodeRequest(q Request) (Enc, error) {
	s := q.String()
	if len(s) > ModelRequestMax {
		return nil, tooLarge("model request", uint64(len(s)), ModelRequestMax)
	}
	return Enc{}.Blob32([]byte(s)), nil
}

// ReadRequest reads a model request: [u32 len][bytes], at most ModelRequestMax.
func ReadRequest(r io.Reader) (string, error) {
	b, err := ReadBlob32(r, ModelRequestMax, "model request")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Status codes of a server's answers.
const (
	StatusOK byte = iota
	StatusBadRequest
	StatusUnauthorized
	StatusNotFound
	StatusBusy
	StatusUnsupported
	StatusInternal
	StatusStale
	StatusTooLarge
	statusCount // not a status: the number of them
)

// StatusFrame encodes an answer: OK, or a code and a message.
func StatusFrame(code byte, msg string) Enc {
	if code == StatusOK {
		return Enc{StatusOK}
	}
	if len(msg) > MessageMax {
		msg = msg[:MessageMax]
	}
	return Enc{code}.Blob32([]byte(msg))
}

// ReadStatus reads an answer's status; a failure becomes a *RemoteError.
func ReadStatus(r io.Reader, what string) error {
	code, err := ReadU8(r, what+" status")
	if err != nil {
		return err
	}
	if code == StatusOK {
		return nil
	}
	if code >= statusCount {
		return Errorf(what, "unknown status %d", code)
	}
	msg, err := ReadBlob32(r, MessageMax, what+" error message")
	if err != nil {
		return err
	}
	return &RemoteError{Code: code, Message: string(msg)}
}

// TransportRequest is the client's choice of data plane and rails.
type TransportRequest struct {
	Mode  Mode
	Rails int
}

// Encode encodes the request, its rails between 1 and MaxRails.
func (t TransportRequest) Encode() Enc {
	return Enc{t.Mode.wire(), byte(min(max(t.Rails, 1), MaxRails))}
}

// ReadTransportRequest reads a transport request, taking n_rails as at
// least 1 and at most limit.
func ReadTransportRequest(r io.Reader, limit int) (TransportRequest, error) {
	var b [2]byte
	if err := ReadFull(r, b[:], "transport"); err != nil {
		return TransportRequest{}, err
	}
	mode, err := modeFromWire(b[0])
	if err != nil {
		return TransportRequest{}, err
	}
	return TransportRequest{Mode: mode, Rails: min(max(int(b[1]), 1), limit, MaxRails)}, nil
}

// TransportAnswer is the server's answer to a transport request: the
// rails granted, the session's secret and every rail's endpoint parameters.
type TransportAnswer struct {
	Secret    [16]byte
	Endpoints [][]byte // one per rail
}

// Encode encodes the answer after an OK status.
func (a TransportAnswer) Encode() Enc {
	e := Enc{StatusOK}.U8(byte(len(a.Endpoints))).Raw(a.Secret[:])
	for _, ep := range a.Endpoints {
		e = e.Blob16(ep)
	}
	return e
}

// ReadTransportAnswer reads the status and the answer to a request for
// asked rails; more rails than asked, or none, are refused.
func ReadTransportAnswer(r io.Reader, asked int) (TransportAnswer, error) {
	var a TransportAnswer
	if err := ReadStatus(r, "transport"); err != nil {
		return a, err
	}
	n, err := ReadU8(r, "rails")
	if err != nil {
		return a, err
	}
	if n == 0 || int(n) > max(asked, 1) {
		return a, Errorf("transport", "%d rails for %d asked", n, asked)
	}
	if err := ReadFull(r, a.Secret[:], "session secret"); err != nil {
		return a, err
	}
	a.Endpoints = make([][]byte, n)
	for i := range a.Endpoints {
		if a.Endpoints[i], err = readBlob16(r, EndpointMax, "rail endpoint"); err != nil {
			return a, err
		}
	}
	return a, nil
}

// TCPEndpoint is a tcp rail's endpoint parameters: where to dial.
type TCPEndpoint struct {
	Host string
	Port int
}

// EncodeTCPEndpoint encodes [u8 len][host][u16 port].
func EncodeTCPEndpoint(host string, port int) []byte {
	return Enc{}.U8(byte(len(host))).Raw([]byte(host)).U16(uint16(port))
}

// DecodeTCPEndpoint parses [u8 len][host][u16 port].
func DecodeTCPEndpoint(b []byte) (TCPEndpoint, error) {
	if len(b) < 1 || len(b) != 1+int(b[0])+2 {
		return TCPEndpoint{}, Errorf("tcp endpoint", "%d bytes do not hold a host and a port", len(b))
	}
	n := 1 + int(b[0])
	host := string(b[1:n])
	if net.ParseIP(host) == nil {
		return TCPEndpoint{}, Errorf("tcp endpoint", "host %q is not an IP address", host)
	}
	return TCPEndpoint{Host: host, Port: int(binary.LittleEndian.Uint16(b[n:]))}, nil
}

// RMAEndpoint is an rma rail's endpoint parameters: the libfabric provider
// and the passive endpoint to connect to.
type RMAEndpoint struct {
	Provider, Host string
	Port           int
}

// EncodeRMAEndpoint encodes [u8 len][provider][u8 len][host][u16 port].
func EncodeRMAEndpoint(provider, host string, port int) []byte {
	return Enc{}.U8(byte(len(provider))).Raw([]byte(provider)).U8(byte(len(host))).Raw([]byte(host)).U16(uint16(port))
}

// DecodeRMAEndpoint parses [u8 len][provider][u8 len][host][u16 port].
func DecodeRMAEndpoint(b []byte) (RMAEndpoint, error) {
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return RMAEndpoint{}, Errorf("rma endpoint", "%d bytes do not hold a provider, a host and a port", len(b))
	}
	n := 1 + int(b[0])
	prov, rest := string(b[1:n]), b[n:]
	tcp, err := DecodeTCPEndpoint(rest)
	if err != nil {
		return RMAEndpoint{}, err
	}
	if prov == "" || !NameRE.MatchString(prov) {
		return RMAEndpoint{}, Errorf("rma endpoint", "provider %q", prov)
	}
	return RMAEndpoint{Provider: prov, Host: tcp.Host, Port: tcp.Port}, nil
}

// RemoteKey is where one shard lies for one rail: its base address and key.
// In a key table, the zero RemoteKey is a shard not registered (empty, or
// of a building artifact): its units' keys are asked for one by one
// (CtlUnit).
type RemoteKey struct{ Base, Key uint64 }

// EncodeKeyTable encodes [u32 count] and count (base, key) pairs, rail by
// rail, shard by shard.
func EncodeKeyTable(keys [][]RemoteKey) []byte {
	n := 0
	for _, r := range keys {
		n += len(r)
	}
	e := Enc{}.U32(uint32(n))
	for _, r := range keys {
		for _, k := range r {
			e = e.U64(k.Base).U64(k.Key)
		}
	}
	return e
}

// UnitKeyRequest asks, after CtlUnit, for the key under which rail Rail
// reads N bytes of a shard from Off: the server answers once it verified
// the range and registered it, with a status and the range's RemoteKey
// (Base is where Off lies).
type UnitKeyRequest struct {
	Rail byte
	RangeRequest
}

// Encode encodes the request, without its CtlUnit byte.
func (q UnitKeyRequest) Encode() Enc { return Enc{}.U8(q.Rail).Raw(q.RangeRequest.Encode()) }

// ReadUnitKeyRequest reads a unit key request after its CtlUnit byte.
func ReadUnitKeyRequest(r io.Reader) (UnitKeyRequest, error) {
	rail, err := ReadU8(r, "unit key rail")
	if err != nil {
		return UnitKeyRequest{}, err
	}
	q, err := ReadRangeRequest(r)
	return UnitKeyRequest{Rail: rail, RangeRequest: q}, err
}

// Encode encodes a unit's key after an OK status.
func (k RemoteKey) Encode() Enc { return Enc{StatusOK}.U64(k.Base).U64(k.Key) }

// ReadUnitKey reads the status and the key answering a UnitKeyRequest.
func ReadUnitKey(r io.Reader) (RemoteKey, error) {
	if err := ReadStatus(r, "unit key"); err != nil {
		return RemoteKey{}, err
	}
	var b [16]byte
	if err := ReadFull(r, b[:], "unit key"); err != nil {
		return RemoteKey{}, err
	}
	return RemoteKey{Base: le64(b[:8]), Key: le64(b[8:])}, nil
}

// ReadKeyTable reads the key table of rails x shards entries; any other
// count is refused before anything is allocated.
func ReadKeyTable(r io.Reader, rails, shards int) ([][]RemoteKey, error) {
	n, err := readU32(r, "key table count")
	if err != nil {
		return nil, err
	}
	if uint64(n) > MaxKeys || uint64(n) != uint64(rails)*uint64(shards) {
		return nil, Errorf("key table", "%d entries for %d rails of %d shards", n, rails, shards)
	}
	keys := make([][]RemoteKey, rails)
	for i := range keys {
		keys[i] = make([]RemoteKey, shards)
		for j := range keys[i] {
			var b [16]byte
			if err := ReadFull(r, b[:], "key table"); err != nil {
				return nil, err
			}
			keys[i][j] = RemoteKey{Base: le64(b[:8]), Key: le64(b[8:])}
		}
	}
	return keys, nil
}

// RailAttach is the first message of a tcp rail, after its hello.
type RailAttach struct {
	Secret, Generation [16]byte
	Rail               byte
}

// Encode encodes the attach message.
func (a RailAttach) Encode() Enc { return Enc{}.Raw(a.Secret[:]).Raw(a.Generation[:]).U8(a.Rail) }

// ReadRailAttach reads a rail's attach message.
func ReadRailAttach(r io.Reader) (RailAttach, error) {
	var a RailAttach
	var b [33]byte
	if err := ReadFull(r, b[:], "rail attach"); err != nil {
		return a, err
	}
	copy(a.Secret[:], b[:16])
	copy(a.Generation[:], b[16:32])
	a.Rail = b[32]
	return a, nil
}

// RangeRequest asks a tcp rail for N bytes of a shard from Off or, with
// Pieces (of a session whose manifest has a piece_size), for the chaining
// values of the range's pieces (PieceCVs).
type RangeRequest struct {
	Shard  uint32
	Off, N uint64
	Pieces bool
}

// piecesBit marks a range request for pieces in its shard field: no
// manifest has 2^31 shards.
const piecesBit = 1 << 31

// Encode encodes the range request.
func (q RangeRequest) Encode() Enc {
	shard := q.Shard
	if q.Pieces {
		shard |= piecesBit
	}
	return Enc{}.U32(shard).U64(q.Off).U64(q.N)
}

// ReadRangeRequest reads a range request.
func ReadRangeRequest(r io.Reader) (RangeRequest, error) {
	var b [20]byte
	if err := ReadFull(r, b[:], "range request"); err != nil {
		return RangeRequest{}, err
	}
	shard := le32(b[0:4])
	return RangeRequest{Shard: shard &^ piecesBit, Off: le64(b[4:12]), N: le64(b[12:20]), Pieces: shard&piecesBit != 0}, nil
}

// EncodePieceCVs encodes the answer to a range request for pieces after
// its OK status: [u32 count][count × 32 bytes].
func EncodePieceCVs(cvs [][32]byte) Enc {
	e := Enc{StatusOK}.U32(uint32(len(cvs)))
	for _, cv := range cvs {
		e = e.Raw(cv[:])
	}
	return e
}

// ReadPieceCVs reads the status and the chaining values answering a range
// request for pieces of n bytes, pieces of pieceSize bytes: a count over
// n/pieceSize + 1, or MaxPieces, is refused before anything is allocated.
func ReadPieceCVs(r io.Reader, n, pieceSize uint64) ([][32]byte, error) {
	if err := ReadStatus(r, "pieces"); err != nil {
		return nil, err
	}
	count, err := readU32(r, "piece count")
	if err != nil {
		return nil, err
	}
	if pieceSize == 0 || uint64(count) > n/pieceSize+1 || uint64(count) > MaxPieces {
		return nil, Errorf("pieces", "%d pieces of %d bytes for a range of %d", count, pieceSize, n)
	}
	cvs := make([][32]byte, count)
	for i := range cvs {
		if err := ReadFull(r, cvs[i][:], "piece chaining value"); err != nil {
			return nil, err
		}
	}
	return cvs, nil
}
