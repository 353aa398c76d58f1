//go:build libfabric

package peer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// TestBuildingArtifactRMA: a child fetches over rma from a node that
// builds the artifact and holds back its last file: the child gets every
// other byte, then waits, reading nothing of the held file, until the
// builder verifies it; then it ends READY and valid.
func TestBuildingArtifactRMA(t *testing.T) {
	a, identity := storetest.Seeded(t, 8<<20, 2)
	p, addr, built := buildingFrom(t, a, identity, &delayedProducer{hold: true}, rmaConfig)
	files := p.src.Files()
	var total int64
	for _, f := range files {
		total += f.Entry.Size
	}
	early := total - files[len(files)-1].Entry.Size
	var moved atomic.Int64
	c := storetest.Open(t)
	type result struct {
		rep *FetchReport
		err error
	}
	fetched := make(chan result, 1)
	go func() {
		l, rep, err := Fetch(context.Background(), c, []string{addr}, digestOf(t, identity),
			FetchOptions{Mode: ModeRMA, Rails: 2, Progress: func(n int64) { moved.Add(n) }})
		if err == nil {
			verifyFull(t, c, l.ID)
			l.Close()
		}
		fetched <- result{rep, err}
	}()
	testenv.Eventually(t, 20*time.Second, func() bool { return moved.Load() >= early }, "the child never verified the %d bytes the builder verified", early)
	// The builder's server holds the child's read of the held file: a byte
	// of it would have been sent instead.
	testenv.Eventually(t, 20*time.Second, func() bool { return buildWaiters() >= 1 }, "the builder's server does not wait for the held file")
	select {
	case r := <-fetched:
		t.Fatalf("the fetch ended before the builder verified its last file: %+v %v", r.rep, r.err)
	default:
	}
	if n := moved.Load(); n != early {
		t.Fatalf("the child verified %d bytes, the builder only %d", n, early)
	}
	close(p.release)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	r := <-fetched
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.Mode != string(ModeRMA) || r.rep.Fetched != total || r.rep.Endpoint != addr {
		t.Fatalf("report %+v", r.rep)
	}
}

// TestBuildingArtifactRMAKeys: a session of a building artifact has no
// shard registered whole; a unit's key comes once the unit is verified and
// reads exactly its bytes; a held unit's key does not come; when the build
// ends without publishing the answer is the typed reason, and a fetch
// gives up instead of waiting.
func TestBuildingArtifactRMAKeys(t *testing.T) {
	a, identity := storetest.Seeded(t, 8<<20, 2)
	p, addr, built := buildingFrom(t, a, identity, &delayedProducer{hold: true, fail: true}, rmaConfig)
	cs, ep, keys := rmaSession(t, addr, digestOf(t, identity))
	defer cs.close()
	defer ep.Close()
	for i, k := range keys[0] {
		if k != (wire.RemoteKey{}) {
			t.Fatalf("shard %d of a building artifact registered whole: %+v", i, k)
		}
	}
	ask := func(shard int, off, n int64) <-chan error {
		q := wire.UnitKeyRequest{RangeRequest: wire.RangeRequest{Shard: uint32(shard), Off: uint64(off), N: uint64(n)}}
		if _, err := cs.conn.Write(wire.Enc{wire.CtlUnit}.Raw(q.Encode())); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			k, err := wire.ReadUnitKey(cs.r)
			if err == nil {
				err = readUnit(ep, k, n, storetest.Data(t, p.src.Files()[shard])[off:off+n])
			}
			got <- err
		}()
		return got
	}
	files := p.src.Files()
	first := files[0].Entry
	if err := <-ask(0, first.Size/2, first.Size/4); err != nil {
		t.Fatalf("a verified unit: %v", err)
	}
	held := ask(len(files)-1, 0, files[len(files)-1].Entry.Size)
	// The server holds the request: a key would have been sent instead.
	testenv.Eventually(t, 20*time.Second, func() bool { return buildWaiters() >= 1 }, "the server does not wait for the unit to be verified")
	select {
	case err := <-held:
		t.Fatalf("the key of a unit not verified came: %v", err)
	default:
	}
	close(p.release)
	if err := <-built; err == nil {
		t.Fatal("the build did not fail")
	}
	var re *wire.RemoteError
	if err := <-held; !errors.As(err, &re) || !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "ended without publishing") {
		t.Fatalf("a unit of a build that ended: %v", err)
	}
	_, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, identity), FetchOptions{Mode: ModeRMA, Patience: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("the child published an artifact its only source never verified")
	}
}

// readUnit reads n bytes with k into a fresh mapping and compares them with want.
func readUnit(ep *fabric.EP, k wire.RemoteKey, n int64, want []byte) error {
	dst, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer syscall.Munmap(dst)
	var cancel atomic.Int32
	if err := ep.ReadBatch([]fabric.ReadOp{{Dst: dst, RAddr: k.Base, Key: k.Key}}, rmaChunk, rmaWindow, 5*time.Second, &cancel); err != nil {
		return err
	}
	if !bytes.Equal(dst, want) {
		return errors.New("the unit's bytes differ from the artifact's")
	}
	return nil
}

// TestRMAUnitKeyReady: a unit key asked of a READY artifact (as a client
// does for a shard whose table key a provider made zero) is its range,
// registered at once.
func TestRMAUnitKeyReady(t *testing.T) {
	src, identity := storetest.Seeded(t, 4<<20, 1)
	l, err := src.Lookup(context.Background(), mustID(t, identity), store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, addr := serve(t, src, rmaConfig)
	cs, ep, _ := rmaSession(t, addr, digestOf(t, identity))
	defer cs.close()
	defer ep.Close()
	f := l.Files()[len(l.Files())-1]
	off, n := f.Entry.Size/3, f.Entry.Size/3
	q := wire.UnitKeyRequest{RangeRequest: wire.RangeRequest{Shard: uint32(len(l.Files()) - 1), Off: uint64(off), N: uint64(n)}}
	if _, err := cs.conn.Write(wire.Enc{wire.CtlUnit}.Raw(q.Encode())); err != nil {
		t.Fatal(err)
	}
	k, err := wire.ReadUnitKey(cs.r)
	if err == nil {
		err = readUnit(ep, k, n, storetest.Data(t, f)[off:off+n])
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.finish(); err != nil {
		t.Fatal(err)
	}
}
