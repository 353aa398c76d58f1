//go:build libfabric

package peer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"golang.org/x/sys/unix"
)

// rmaServePlane is the server side of an rma session: a passive endpoint
// per rail, and every shard's mapping registered read-only for remote reads
// on every rail until the session ends. Once the rails are connected the
// server's process does nothing more for the transfer: the fabric (or the
// provider's own progress) answers the client's one-sided reads.
//
// A building artifact's shards are in the key table unregistered: the
// client asks for each unit's key (CtlUnit), and the server registers the
// unit's range alone, on the rail asked, once the builder verified it, so
// no unverified byte is ever readable remotely. Its files are mapped whole
// but registered only unit by unit. Publication renames the build's
// directory and rewrites no file: the mappings and registrations stay
// valid, and the session goes on.
type rmaServePlane struct {
	ss        *session
	provider  string
	hosts     []string
	timeout   time.Duration
	listeners []*fabric.Listener
	ports     []int
	eps       []*fabric.EP
	mrs       []*fabric.MR
	maps      map[int][]byte // a building artifact's files, by shard, mapped as units are asked for
	stop      chan struct{}
	progress  sync.WaitGroup
}

// probeRMA checks the configured provider once, at the server's start (it
// also pays libfabric's discovery of its providers there, not during a
// session).
func probeRMA(provider string) error { return fabric.Probe(provider) }

func newRMAServePlane(provider string, ss *session, hosts []string, timeout time.Duration) (servePlane, error) {
	p := &rmaServePlane{ss: ss, provider: provider, hosts: hosts, timeout: timeout, maps: map[int][]byte{}, stop: make(chan struct{})}
	for _, h := range hosts {
		l, port, err := fabric.Listen(provider, h)
		if err != nil {
			p.close()
			return nil, err
		}
		p.listeners = append(p.listeners, l)
		p.ports = append(p.ports, port)
	}
	return p, nil
}

func (p *rmaServePlane) endpoints() [][]byte {
	out := make([][]byte, len(p.hosts))
	for r, h := range p.hosts {
		out[r] = wire.EncodeRMAEndpoint(p.listeners[r].Provider(), h, p.ports[r])
	}
	return out
}

// ready accepts every rail, then registers every shard on each. A rail is
// awaited no longer than the client waits for its connect (dialTimeout), so
// a session whose client gave up frees its listeners then; registering,
// which may take long for large shards, comes after all the client's
// connects, not between them. A building artifact's shards have no mapping
// yet: their entries stay zero, and unit registers them unit by unit.
func (p *rmaServePlane) ready(ctx context.Context) ([]byte, error) {
	for r, l := range p.listeners {
		ep, err := l.Accept(min(p.timeout, dialTimeout))
		if err != nil {
			return nil, fmt.Errorf("rail %d: %w", r, err)
		}
		p.eps = append(p.eps, ep)
	}
	keys := make([][]wire.RemoteKey, len(p.eps))
	for r, ep := range p.eps {
		keys[r] = make([]wire.RemoteKey, len(p.ss.sv.shards))
		for i, s := range p.ss.sv.shards {
			if len(s.data) == 0 {
				continue // an empty shard is never read; a building one's units are asked for
			}
			k, err := p.register(ep, s.data)
			if err != nil {
				return nil, fmt.Errorf("rail %d: register %s: %w", r, s.entry.Path, err)
			}
			keys[r][i] = k
		}
		p.progress.Go(func() { p.drive(ep) })
	}
	return wire.EncodeKeyTable(keys), nil
}

// register registers mem read-only for remote reads on ep until the
// session ends.
func (p *rmaServePlane) register(ep *fabric.EP, mem []byte) (wire.RemoteKey, error) {
	var rk [8]byte
	rand.Read(rk[:])
	mr, err := ep.Register(mem, fabric.AccessRemoteRead, binary.LittleEndian.Uint64(rk[:]))
	if err != nil {
		return wire.RemoteKey{}, err
	}
	p.mrs = append(p.mrs, mr)
	return wire.RemoteKey{Base: mr.RAddr, Key: mr.Key}, nil
}

// unit registers q's range on q's rail once the builder verified it,
// waiting for it within the timeout, and answers its key; a
// *store.BuildEndedError when the build ended without publishing. A READY
// artifact's range (whose shard's key a provider happened to make zero) is
// registered at once.
func (p *rmaServePlane) unit(ctx context.Context, q wire.UnitKeyRequest) (wire.RemoteKey, error) {
	sv := p.ss.sv
	if int(q.Rail) >= len(p.eps) || q.N == 0 {
		return wire.RemoteKey{}, badInput("unit key of %d bytes on rail %d of %d", q.N, q.Rail, len(p.eps))
	}
	if err := sv.checkRange(q.RangeRequest); err != nil {
		return wire.RemoteKey{}, err
	}
	i, path := int(q.Shard), sv.shards[q.Shard].entry.Path
	f, err := sv.rangeFile(ctx, i, int64(q.Off), int64(q.N), p.timeout)
	if err != nil {
		return wire.RemoteKey{}, fmt.Errorf("unit of %s: %w", path, err)
	}
	data := sv.shards[i].data // a READY artifact's mapping
	if sv.building != nil {
		if data, err = p.mapBuilding(i, f); err != nil {
			return wire.RemoteKey{}, fmt.Errorf("map building %s: %w", path, err)
		}
	}
	k, err := p.register(p.eps[q.Rail], data[q.Off:q.Off+q.N])
	if err != nil {
		return wire.RemoteKey{}, fmt.Errorf("rail %d: register %d+%d of %s: %w", q.Rail, q.Off, q.N, path, err)
	}
	return k, nil
}

// mapBuilding maps a building artifact's file f, shard i, once per
// session: whole, as long as the file will be; what is not written yet is
// never touched, here or remotely.
func (p *rmaServePlane) mapBuilding(i int, f *os.File) ([]byte, error) {
	if data, ok := p.maps[i]; ok {
		return data, nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(p.ss.sv.shards[i].entry.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	p.maps[i] = data
	return data, nil
}

// drive waits on the rail's completion queue on a locked OS thread, for
// providers whose target side must be driven; it reads no payload.
func (p *rmaServePlane) drive(ep *fabric.EP) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		if ep.Progress(50*time.Millisecond) != nil {
			return
		}
	}
}

// close deregisters every shard and closes the rails and listeners.
func (p *rmaServePlane) close() {
	close(p.stop)
	p.progress.Wait()
	for _, mr := range p.mrs {
		mr.Close()
	}
	for _, ep := range p.eps {
		ep.Close()
	}
	for _, l := range p.listeners {
		l.Close()
	}
	for _, data := range p.maps {
		unix.Munmap(data)
	}
}
