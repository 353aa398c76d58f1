package oci

import (
	"context"
	"encoding/json"
	"io"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
)

// announce lets this node serve a weightsnap artifact while it pulls it
// (chain seeding), when a process serves the store: before any
// payload it announces the index layer's entries with every safetensors
// file's header region, fetched first as a small range and checked against
// the entry's header BLAKE3 (which the manifest's sha256 chain pins). A
// foreign artifact (no index layer), or a registry that serves no ranges,
// is pulled without being announced.
func (p *puller) announce(ctx context.Context, w artifact.Writer) error {
	if p.plan.Kind != KindWeightsnap || !w.Seeding() {
		return nil
	}
	a := artifact.Announcement{Identity: p.plan.Identity}
	for _, f := range p.plan.Files {
		e := f.Binding.Want
		var hdr []byte
		if e.DataStart > 0 {
			var err error
			if hdr, err = p.header(ctx, f); err != nil {
				log.G(ctx).WithError(err).WithField("file", f.Path).Info("pull: not announced to peers (no header range)")
				return nil
			}
			if artifact.BLAKE3Hex(hdr) != e.HeaderBLAKE3 {
				// The pull's own checks name the corrupted layer.
				log.G(ctx).WithField("file", f.Path).Warn("pull: not announced to peers (the header differs from the index layer's)")
				return nil
			}
		}
		a.Files = append(a.Files, e)
		a.Headers = append(a.Headers, hdr)
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := w.Announce(doc); err != nil {
		return err
	}
	if err := w.Source(0); err != nil {
		return err
	}
	p.seed = w
	if err := p.loadPieces(ctx); err != nil {
		return err
	}
	// Peers read the files in plan order, each tensor in turn, as soon as
	// this node verified it: the files stream one at a time, in that order,
	// whole (ranges in parallel would verify a file in bursts), and the
	// store's writer checks each tensor against the index layer as it is
	// written (artifact.BindTreeStream), before the whole file's tree.
	p.o.FilesInFlight, p.o.Ranges = 1, RangesOff
	return nil
}

// header fetches a safetensors file's header region.
func (p *puller) header(ctx context.Context, f PlanFile) ([]byte, error) {
	n := f.Binding.Want.DataStart
	rc, err := p.r.GetBlob(ctx, f.Layer, 0, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	hdr := make([]byte, n)
	if _, err := io.ReadFull(rc, hdr); err != nil {
		return nil, err
	}
	return hdr, nil
}

// verified records a file whose sha256 (and entry) checked, once written:
// the store's writer recorded its tensors as each checked (artifact.Binding.ChecksTensors);
// the rest of the file, a file that is not safetensors, counts now.
func (p *puller) verified(f PlanFile) error {
	if p.seed == nil {
		return nil
	}
	return p.seed.Verified(f.Path, 0, f.Size)
}
