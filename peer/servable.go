package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// shard is one payload file a session serves: its entry, an open
// descriptor (sendfile) and its read-only mapping (remote reads).
type shard struct {
	entry artifact.FileEntry
	file  *os.File
	data  []byte // nil for an empty file
}

// servable is what one session serves, held (a store lease, or a reference
// on an exported directory) until release.
type servable struct {
	manifest wire.WeightManifest // without the generation
	shards   []shard
	building *store.Building // set when the artifact is being built here (serve_building.go); shards then have no file yet
	release  func()
}

// open resolves a model request to what it names: a READY artifact by
// identity or manifest digest, or an exported directory.
func (s *Server) open(ctx context.Context, request wire.Request) (*servable, error) {
	if request.Export != "" {
		return s.exports.open(ctx, request.Export)
	}
	// An identity and a manifest digest have the same form: the request is
	// looked up as the one, then as the other.
	id := request.ID
	l, err := s.d.Lookup(ctx, id, store.ManifestAndMetadata)
	if errors.Is(err, store.ErrMiss) && !store.IsInvalid(err) {
		byManifest, ferr := s.byManifestDigest(ctx, id.String())
		if ferr != nil {
			if sv, berr := s.openBuilding(ctx, id); berr == nil {
				return sv, nil // not READY here, but being built
			}
			return nil, ferr
		}
		l, err = s.d.Lookup(ctx, byManifest, store.ManifestAndMetadata)
	}
	if err != nil {
		if errors.Is(err, store.ErrMiss) || store.IsInvalid(err) {
			if sv, berr := s.openBuilding(ctx, id); berr == nil {
				return sv, nil
			}
			return nil, fmt.Errorf("no READY artifact %s here: %w", id.Short(), errdefs.ErrNotFound)
		}
		return nil, err
	}
	return servableFromLease(l)
}

// records are the store's trust records of id, for its manifest
// (nil when there are none, or they cannot be read or sent: the receiver
// then verifies with the registry, or refuses).
func (s *Server) records(ctx context.Context, id artifact.ID) []byte {
	raw, err := s.d.Records(id)
	if err != nil || uint64(len(raw)) > artifact.MaxRecordsBytes {
		log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("peer: the artifact's signature records are not sent")
		return nil
	}
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// byManifestDigest finds the artifact whose manifest.json has the digest.
func (s *Server) byManifestDigest(ctx context.Context, digest string) (artifact.ID, error) {
	infos, err := s.d.List(ctx)
	if err != nil {
		return artifact.ID{}, err
	}
	for _, a := range infos {
		if a.State == store.StateReady && a.ManifestDigest == digest {
			return a.ID, nil
		}
	}
	return artifact.ID{}, fmt.Errorf("no READY artifact with identity or manifest digest %s here: %w", digest, errdefs.ErrNotFound)
}

// servableFromLease serves a leased artifact; its manifest gives every
// digest in the current index schema (an artifact of an older one gets its
// tensor trees derived from the hashes it holds).
func servableFromLease(l *store.Lease) (*servable, error) {
	x := *l.Index
	x.Files = slices.Clone(x.Files)
	if err := x.Upgrade(); err != nil {
		l.Close()
		return nil, err
	}
	sv := &servable{release: func() { l.Close() }}
	sv.manifest = wire.WeightManifest{Schema: wire.ManifestSchema, Identity: l.Identity(), ID: l.Manifest.ID,
		ManifestDigest: digest.NewDigestFromEncoded(digest.SHA256, l.Ready.ManifestSHA256)}
	for i, f := range l.Files() {
		data, err := f.Data()
		if err != nil {
			l.Close()
			return nil, err
		}
		sv.shards = append(sv.shards, shard{entry: f.Entry, file: f.File, data: data})
		sv.manifest.Shards = append(sv.manifest.Shards, wire.ShardFromEntry(x.Files[i], data))
	}
	return sv, nil
}

// listedStripes are the stripes of id that children counts sessions of,
// in stripe order.
func listedStripes(children map[childKey]int, id artifact.ID) []wire.ListedStripe {
	var out []wire.ListedStripe
	for k, n := range children {
		if k.id == id && k.stripe.Count > 0 && !k.slow && n > 0 {
			out = append(out, wire.ListedStripe{Index: k.stripe.Index, Count: k.stripe.Count, Sessions: n})
		}
	}
	slices.SortFunc(out, func(a, b wire.ListedStripe) int {
		return cmp.Or(cmp.Compare(a.Count, b.Count), cmp.Compare(a.Index, b.Index))
	})
	return out
}

func (s *Server) listing(ctx context.Context) (*wire.Listing, error) {
	infos, err := s.d.List(ctx)
	if err != nil {
		return nil, err
	}
	ls := &wire.Listing{Generation: s.gen, Sessions: int(s.active.Load()), MaxSessions: s.cfg.MaxSessions, MaxChildren: s.cfg.MaxChildren,
		Modes: s.modes(), Artifacts: []wire.ListedArtifact{}, Exports: s.exports.list(), Wants: s.d.Wants()}
	s.mu.Lock()
	children := maps.Clone(s.children)
	s.mu.Unlock()
	ready := map[artifact.ID]bool{}
	for _, a := range infos {
		if a.State != store.StateReady || a.Identity == nil {
			continue
		}
		ready[a.ID] = true
		ls.Artifacts = append(ls.Artifacts, wire.ListedArtifact{ID: a.ID, ManifestDigest: a.ManifestDigest,
			Repository: a.Identity.Model.Repository, Revision: a.Identity.Model.Revision, Component: a.Identity.Component,
			Producer: a.Identity.Producer.Name, Bytes: a.TotalBytes, Files: len(a.Files), Tensors: a.TensorCount, Children: children[childKey{id: a.ID}],
			Stripes: listedStripes(children, a.ID)})
	}
	for _, id := range s.d.Builds(ctx) {
		if ready[id] {
			continue
		}
		if la, ok := listBuilding(ctx, s.d, id); ok {
			la.Children, la.Stripes = children[childKey{id: id}], listedStripes(children, id)
			ls.Artifacts = append(ls.Artifacts, la)
		}
	}
	return ls, nil
}
