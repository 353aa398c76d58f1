package peer

import (
	"encoding/json"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// A fetch that this node serves while it runs (chain seeding: the server
// side is serve_building.go) announces the manifest it fetches from before
// any payload, then records each range it verified and, with pieces, each
// unit's chaining values (fetch_pieces.go).

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
