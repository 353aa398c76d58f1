package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// Chain seeding: a node serves an artifact while it builds it. The builder
// (a fetch here, or a registry pull) announces the artifact before any
// payload and records every range it verified; the server answers a
// request for an artifact it does not hold READY with the announced
// manifest, and a ranged read of it waits until the range is verified.
// On the rma plane, whose one-sided reads cannot wait, the client asks for
// each unit's key and the server registers the unit only once it is
// verified (rma_server.go).

// announce records the manifest a fetch serves from, as its announcement.
func announce(sd artifact.Seeder, m *wire.WeightManifest) error {
	a := artifact.Announcement{Identity: m.Identity}
	for _, s := range m.Shards {
		a.Files = append(a.Files, s.FileEntry)
		a.Headers = append(a.Headers, s.Header)
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return sd.Announce(doc)
}

// openBuilding serves the announced build of id, when this node builds it.
func (s *Server) openBuilding(ctx context.Context, id artifact.ID) (*servable, error) {
	b, err := s.d.Building(ctx, id)
	if err != nil {
		return nil, err
	}
	m, err := buildingManifest(b)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("announcement of %s: %w", id.Short(), err)
	}
	sv := &servable{manifest: *m, building: b, release: func() { b.Close() }}
	for _, sh := range m.Shards {
		sv.shards = append(sv.shards, shard{entry: sh.FileEntry})
	}
	return sv, nil
}

// buildingManifest is a building artifact's manifest, from its announcement.
func buildingManifest(b *store.Building) (*wire.WeightManifest, error) {
	var a artifact.Announcement
	if err := artifact.DecodeStrictJSON(bytes.NewReader(b.Document()), &a); err != nil {
		return nil, err
	}
	id, err := a.Identity.ID()
	if err != nil {
		return nil, err
	}
	if id != b.ID() || len(a.Headers) != len(a.Files) {
		return nil, fmt.Errorf("announces %s with %d headers for %d files: %w", id.Short(), len(a.Headers), len(a.Files), errdefs.ErrDataLoss)
	}
	m := &wire.WeightManifest{Schema: wire.ManifestSchema, Identity: a.Identity, ID: id, Building: true, Depth: b.Depth()}
	for i, e := range a.Files {
		if int64(len(a.Headers[i])) != e.DataStart {
			return nil, fmt.Errorf("%s: header of %d bytes, data starts at %d: %w", e.Path, len(a.Headers[i]), e.DataStart, errdefs.ErrDataLoss)
		}
		m.Shards = append(m.Shards, wire.ShardFromEntry(e, a.Headers[i]))
	}
	return m, nil
}

// rangeFile is the descriptor to send [off, off+n) of shard i from: a
// building artifact's once the range is verified, waiting for it within
// timeout.
func (sv *servable) rangeFile(ctx context.Context, i int, off, n int64, timeout time.Duration) (*os.File, error) {
	sh := sv.shards[i]
	if sv.building == nil {
		return sh.file, nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := sv.building.Wait(wctx, sh.entry.Path, off, n); err != nil {
		return nil, err
	}
	return sv.building.File(sh.entry.Path)
}

// listBuilding is the listing's entry of an artifact being built here.
func listBuilding(ctx context.Context, d *store.Domain, id artifact.ID) (wire.ListedArtifact, bool) {
	b, err := d.Building(ctx, id)
	if err != nil {
		return wire.ListedArtifact{}, false
	}
	defer b.Close()
	m, err := buildingManifest(b)
	if err != nil {
		return wire.ListedArtifact{}, false
	}
	tensors := 0
	for _, sh := range m.Shards {
		tensors += len(sh.Tensors)
	}
	return wire.ListedArtifact{ID: id, Repository: m.Identity.Model.Repository, Revision: m.Identity.Model.Revision,
		Component: m.Identity.Component, Producer: m.Identity.Producer.Name, Bytes: m.TotalBytes(), Files: len(m.Shards),
		Tensors: tensors, Building: true, VerifiedBytes: b.VerifiedBytes(), Depth: m.Depth}, true
}
