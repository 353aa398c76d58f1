package resolve

import (
	"context"
	"path/filepath"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/store"
)

// ImportRequest is the import of a safetensors checkpoint directory as it
// is (the passthrough producer).
type ImportRequest struct {
	// Dir is the checkpoint directory.
	Dir string
	// Repository, Revision (immutable) and Component name the model.
	Repository, Revision, Component string
	// TPSize and TPRank describe a pre-sharded checkpoint.
	TPSize, TPRank int
	// OnTotal, if set, is told the payload size before any byte is copied.
	OnTotal func(total int64)
	// Progress, if set, is told of payload bytes copied.
	Progress func(n int64)
	// Check, if set, is given the artifact's id and the entries the store
	// computed while it copied the files (every sha256 and BLAKE3), before
	// anything is published: an error refuses the import (the caller's
	// check of a model.sig against them, which keeps its record). With it
	// every file is copied and hashed, even when the store holds the
	// artifact.
	Check func(ctx context.Context, id artifact.ID, files []artifact.FileEntry) error
}

// Import publishes a checkpoint directory in d, reading each source byte at
// most once. Source fingerprints come from the store's fingerprint cache;
// when every file's sha256 is known the identity comes first and a build
// runs only on a miss (a warm import reads no source byte); otherwise one
// pass copies and hashes, the identity is derived from the copy, and the
// cache records the new fingerprints.
func Import(ctx context.Context, d *store.Domain, req ImportRequest) (*store.Lease, store.BuildResult, error) {
	cache := fingerprint.New(filepath.Join(d.Root(), fingerprint.DirName))
	fp, err := cache.Lookup(ctx, req.Dir)
	if err != nil {
		return nil, store.BuildResult{}, err
	}
	src := fp.Src
	identityOf := func(s *artifact.SourceDir) artifact.Identity {
		return artifact.PassthroughIdentity(s, req.Repository, req.Revision, req.Component, req.TPSize, req.TPRank)
	}
	// A mutable revision (a branch) is refused before any byte is copied.
	if err := identityOf(src).Validate(); err != nil && !artifact.IsImmutableRevision(req.Revision) {
		return nil, store.BuildResult{}, err
	}
	if req.OnTotal != nil {
		var total int64
		for _, f := range src.Files {
			total += f.Size
		}
		req.OnTotal(total)
	}
	producer := &artifact.Passthrough{Src: src, Progress: req.Progress}
	if src.Complete() && req.Check == nil {
		// Every sha256 is known: the identity first, a build only on a miss.
		return d.GetOrBuild(ctx, identityOf(src), producer)
	}
	// One pass: copy, hashing as it goes, then derive the identity from the copy.
	started := time.Now().UnixNano()
	lease, res, err := d.Import(ctx, producer, func(files []artifact.FileEntry) (artifact.Identity, error) {
		full, err := src.WithDigests(files)
		if err != nil {
			return artifact.Identity{}, err
		}
		identity := identityOf(full)
		if req.Check != nil {
			id, err := identity.ID()
			if err != nil {
				return artifact.Identity{}, err
			}
			if err := req.Check(ctx, id, files); err != nil {
				return artifact.Identity{}, err
			}
		}
		return identity, nil
	})
	if err == nil {
		cache.Record(ctx, fp, lease.Index.Files, started)
	}
	return lease, res, err
}
