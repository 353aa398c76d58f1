package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// anonymous builds are named anon-<hex> until their identity is known.
const anonPrefix = "anon-"

// IdentityFunc derives an artifact's identity from the files a producer wrote.
type IdentityFunc func(files []artifact.FileEntry) (artifact.Identity, error)

// Import publishes what p writes under the identity that identityFor derives
// from the written files: the single pass of a cold import, which
// fingerprints the source while it copies it instead of reading it twice.
// If that identity is already published and valid, the copy is discarded
// and the existing artifact is leased (BuildResult.Built is false).
// A copy that lacks room is discarded, and p runs again once the domain's
// RoomMaker made the room.
func (d *Domain) Import(ctx context.Context, p artifact.Producer, identityFor IdentityFunc) (*Lease, BuildResult, error) {
	var res BuildResult
	if err := d.failedErr(); err != nil {
		return nil, res, err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	anon := anonPrefix + hex.EncodeToString(rnd[:])
	al, ok, err := tryLock(d.ownerLockPath(anon, "build"), unix.LOCK_EX)
	if !ok {
		return nil, res, fmt.Errorf("lock anonymous build: %w", err)
	}
	defer func() {
		os.Remove(d.ownerLockPath(anon, "build"))
		al.Close()
	}()
	start := time.Now()
	var b *build
	_, err = d.buildWithRoom(ctx, artifact.ID{}, func() (*Lease, error) {
		if b, err = d.newBuild(ctx, artifact.Identity{}, artifact.ID{}, anon); err != nil {
			return nil, err
		}
		if err := p.Produce(ctx, b); err != nil {
			b.abort()
			return nil, fmt.Errorf("producer %s: %w", p.Name(), err)
		}
		return nil, nil
	})
	if err != nil {
		return nil, res, err
	}
	identity, err := identityFor(b.entries())
	if err == nil {
		err = identity.Validate()
	}
	if err != nil {
		b.abort()
		return nil, res, err
	}
	id, _ := identity.ID()
	deadline := time.Now().Add(d.policy.CoordinationTimeout())
	l, err := d.publishLocked(ctx, id, deadline, false, &res, func() error {
		b.identity, b.id = identity, id
		if err := b.publish(ctx, p.Name(), deadline); err != nil {
			return fmt.Errorf("publish %s: %w", id.Short(), err)
		}
		return nil
	})
	if !res.Built {
		b.abort() // a failed publication, or the identity already published
		return l, res, err
	}
	res.Produce = time.Since(start)
	return l, res, err
}

// entries are the hashes of the files written so far, sorted by path; a
// file still open has none yet.
func (b *build) entries() []artifact.FileEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]artifact.FileEntry, 0, len(b.files))
	for _, w := range b.files {
		if w.closed && w.err == nil {
			out = append(out, w.entry)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
