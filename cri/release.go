package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"google.golang.org/grpc/connectivity"
)

// releaseTimeout bounds what a release asks containerd.
const releaseTimeout = 30 * time.Second

// Release implements evict.Releaser: it removes the CRI images that need the artifact id.
//
// The images are those of containerd's CRI namespace. The kubelet pulls one
// again, with the pod's own credentials, when a pod needs it. containerd's
// garbage collection removes their weight snapshots later. The snapshotter's
// Release, called after this one, empties them at once, so the eviction
// frees its bytes. Release does not wait for the garbage collection: an
// eviction may run inside a Prepare containerd is serving, which the
// collection waits for. The eviction policy calls it only for an artifact
// nothing leases, so no container uses those images. When containerd is not
// up it removes nothing and says so.
func (s *Service) Release(ctx context.Context, id artifact.ID) error {
	// Calls to containerd wait for it to be up: an eviction does not.
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	if !s.upstreamUp(ctx) {
		return fmt.Errorf("containerd at %s is not up: no CRI image removed: %w", s.cfg.Upstream, errdefs.ErrUnavailable)
	}
	nctx := namespaces.WithNamespace(ctx, Namespace)
	is := s.ctd.ImageService()
	imgs, err := is.List(nctx)
	if err != nil {
		return fmt.Errorf("containerd images: %w", err)
	}
	var doomed []string
	for _, img := range imgs {
		m, err := images.Manifest(nctx, s.ctd.ContentStore(), img.Target, platforms.Default())
		if err != nil {
			continue
		}
		for _, l := range m.Layers {
			if p, ok, err := pointer.ParseLabels(l.Annotations); ok && err == nil && p.ID == id {
				doomed = append(doomed, img.Name)
				break
			}
		}
	}
	var errs []error
	for _, name := range doomed {
		if err := is.Delete(nctx, name); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove image %s: %w", name, err))
			continue
		}
		log.G(ctx).WithField("image", name).WithField("id", id).Info("cri: removed an unused image so that evicting its artifact frees the bytes")
	}
	return errors.Join(errs...)
}

// upstreamUp says whether the connection to containerd is up, connecting
// if it is idle, without waiting out a containerd that is down.
func (s *Service) upstreamUp(ctx context.Context) bool {
	s.conn.Connect()
	for st := s.conn.GetState(); st != connectivity.Ready; st = s.conn.GetState() {
		if st == connectivity.TransientFailure || st == connectivity.Shutdown || !s.conn.WaitForStateChange(ctx, st) {
			return false
		}
	}
	return true
}
