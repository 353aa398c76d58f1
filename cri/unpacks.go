package cri

import (
	"context"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/pointer"
)

// gcSnapshotLabel starts the label containerd puts on an image's config
// once a snapshotter unpacked it: containerd.io/gc.ref.snapshot.NAME.
const gcSnapshotLabel = "containerd.io/gc.ref.snapshot."

// Snapshotter is the name containerd knows weightsnap's snapshotter by.
const Snapshotter = "weightsnap"

// UnpackWatch finds weight images that a snapshotter other than weightsnap unpacked.
//
// It looks at containerd's images in every namespace. Such an unpack comes
// from nerdctl run without --snapshotter weightsnap, or a CRI whose
// snapshotter is overlayfs. Its containers start with only the pointer files
// where the weights belong, and weightsnapd never sees those layers. Each
// such unpack is logged and counted once.
type UnpackWatch struct {
	s      *Service
	seen   map[string]bool // namespace, image and snapshotter already told
	unseen prometheus.Counter
}

// NewUnpackWatch is the watch of s's containerd.
// It counts in a metric it registers with reg.
func NewUnpackWatch(s *Service, reg prometheus.Registerer) (*UnpackWatch, error) {
	w := &UnpackWatch{s: s, seen: map[string]bool{}, unseen: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "weightsnap", Name: "unseen_weight_unpacks_total",
		Help: "Weight images that a snapshotter other than weightsnap unpacked, each counted once: their containers see only the pointer files."})}
	return w, reg.Register(w.unseen)
}

// Run looks at containerd's images every interval until ctx ends.
// A containerd it cannot reach is logged at debug level and looked at again next time.
func (w *UnpackWatch) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := w.look(ctx); err != nil && ctx.Err() == nil {
			log.G(ctx).WithError(err).Debug("unpack watch: containerd's images could not be read")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look reads every image once.
func (w *UnpackWatch) look(ctx context.Context) error {
	nss, err := w.s.ctd.NamespaceService().List(ctx)
	if err != nil {
		return err
	}
	cs := w.s.ctd.ContentStore()
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		imgs, err := w.s.ctd.ImageService().List(nctx)
		if err != nil {
			return err
		}
		for _, img := range imgs {
			m, err := images.Manifest(nctx, cs, img.Target, platforms.Default())
			if err != nil || !hasWeightLayer(m.Layers) {
				continue
			}
			info, err := cs.Info(nctx, m.Config.Digest)
			if err != nil {
				continue
			}
			for _, sn := range unpackedBy(info.Labels) {
				key := ns + "\x00" + img.Name + "\x00" + sn
				if sn == Snapshotter || w.seen[key] {
					continue
				}
				w.seen[key] = true
				w.unseen.Inc()
				log.G(ctx).WithField("image", img.Name).WithField("namespace", ns).WithField("snapshotter", sn).
					Warn("a weight image was unpacked by another snapshotter: its containers see only the pointer files, not the weights; run it with nerdctl --snapshotter weightsnap (or snapshotter = \"weightsnap\" in nerdctl.toml), or give the CRI the snapshotter weightsnap")
			}
		}
	}
	return nil
}

// unpackedBy names the snapshotters an image's config labels say unpacked it.
func unpackedBy(labels map[string]string) []string {
	var out []string
	for k := range labels {
		if sn, ok := strings.CutPrefix(k, gcSnapshotLabel); ok && sn != "" {
			out = append(out, sn)
		}
	}
	return out
}

// hasWeightLayer says whether one of the layers is a pointer layer.
func hasWeightLayer(layers []ocispec.Descriptor) bool {
	for _, l := range layers {
		if pointer.IsWeightLayer(l.Annotations) {
			return true
		}
	}
	return false
}
