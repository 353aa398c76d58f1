package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// dirPins holds pins/<id>.json: who pinned an artifact and why. A pinned
// artifact is never evicted and `rm` refuses it. A pin names its holder
// (PinByCLI, or the prefetch file that declares it), so one holder's unpin
// leaves the others' pins; the record outlives the artifact (a pin is on
// the identity: a rebuilt artifact is pinned again).
const dirPins = "pins"

// maxPinBytes bounds a pin record read from disk.
const maxPinBytes = 1 << 20

// PinByCLI is the holder of pins set with `weightsnap pin`.
const PinByCLI = "cli"

// Pin is one holder's pin of an artifact.
type Pin struct {
	By     string `json:"by"`               // the holder: "cli", "prefetch:<file>"
	Reason string `json:"reason,omitempty"` // free text
	Ref    string `json:"ref,omitempty"`    // the reference the holder named, if any
	Time   string `json:"time"`             // RFC 3339, when it was set
}

// pinRecord is pins/<id>.json.
type pinRecord struct {
	Schema int   `json:"schema"`
	Pins   []Pin `json:"pins"`
}

// Pin pins the READY artifact id for the holder p.By.
// It replaces that holder's earlier pin.
// The artifact must be in the store: the pin is written while a lease holds it.
// An eviction either ran before, and the pin fails with ErrMiss, or waits for it.
// Pinning is no use of the artifact: its last use stays.
func (d *Domain) Pin(ctx context.Context, id artifact.ID, p Pin) error {
	if p.By == "" {
		return fmt.Errorf("pin of %s names no holder: %w", id.Short(), errdefs.ErrInvalidArgument)
	}
	l, err := d.lookup(ctx, id, ManifestAndMetadata, false)
	if err != nil {
		return err
	}
	defer l.Close()
	if p.Time == "" {
		p.Time = time.Now().UTC().Format(time.RFC3339)
	}
	return d.editPins(ctx, id, func(pins []Pin) []Pin {
		pins = slices.DeleteFunc(pins, func(q Pin) bool { return q.By == p.By })
		return append(pins, p)
	})
}

// Unpin drops the pins of id that the holder by holds and says how many it dropped.
// An empty by drops every holder's.
// The artifact stays.
func (d *Domain) Unpin(ctx context.Context, id artifact.ID, by string) (int, error) {
	n := 0
	err := d.editPins(ctx, id, func(pins []Pin) []Pin {
		before := len(pins)
		pins = slices.DeleteFunc(pins, func(q Pin) bool { return by == "" || q.By == by })
		n = before - len(pins)
		return pins
	})
	return n, err
}

// Pins are the pins of id, none when it is not pinned.
func (d *Domain) Pins(id artifact.ID) ([]Pin, error) {
	raw, err := readPinFile(d.path(dirPins, id.Hex()+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec pinRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("pin record of %s is corrupt: %w: %w", id.Short(), err, errdefs.ErrDataLoss)
	}
	return rec.Pins, nil
}

// PinnedBy lists every pinned identity with its pins.
func (d *Domain) PinnedBy() (map[artifact.ID][]Pin, error) {
	entries, err := os.ReadDir(d.path(dirPins))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[artifact.ID][]Pin{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		id, err := artifact.ParseIDHex(name)
		if !ok || err != nil {
			continue
		}
		if pins, err := d.Pins(id); err == nil && len(pins) > 0 {
			out[id] = pins
		}
	}
	return out, nil
}

// editPins rewrites id's pin record under locks/pins.lock, durably; an
// empty record is removed.
func (d *Domain) editPins(ctx context.Context, id artifact.ID, edit func([]Pin) []Pin) error {
	return d.editArtifactFile(ctx, "pins", d.path(dirPins, id.Hex()+".json"), func() ([]byte, error) {
		pins, err := d.Pins(id)
		if err != nil {
			return nil, err
		}
		if pins = edit(pins); len(pins) == 0 {
			return nil, nil
		}
		return json.MarshalIndent(pinRecord{Schema: 1, Pins: pins}, "", "  ")
	})
}

func readPinFile(p string) ([]byte, error) {
	raw, err := artifact.ReadFileAtMost(p, maxPinBytes)
	if errors.Is(err, artifact.ErrFileTooLarge) {
		return nil, fmt.Errorf("pin record %w: %w", err, errdefs.ErrDataLoss)
	}
	return raw, err
}
