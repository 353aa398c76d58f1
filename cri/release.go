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
)

// releaseTimeout bounds what a release asks containerd.
const releaseTimeout = 30 * time.Second

// Release implements store.Releaser: before the store evicts the artifact
// id, the images of containerd's CRI namespace that need it are removed
// (the kubelet pulls again, with the pod's own credentials, when a pod
// needs one), and containerd's garbage collection, run before Release
// returns, removes their weight snapshots and with them the snapshots'
// links to the artifact's files, so the eviction frees its bytes. The
// store calls it only for an artifact nothing leases: no container uses
// those images.
func (s *Service) Release(ctx context.Context, id artifact.ID) error {
	// Calls to containerd wait for it to be up: an eviction does not.
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
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
	for i, name := range doomed {
		var opts []images.DeleteOpt
		if i == len(doomed)-1 {
			opts = append(opts, images.SynchronousDelete()) // the last one waits for the garbage collection
		}
		if err := is.Delete(nctx, name, opts...); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove image %s: %w", name, err))
			continue
		}
		log.G(ctx).WithField("image", name).WithField("identity", id).Info("cri: removed an unused image so that evicting its artifact frees the bytes")
	}
	return errors.Join(errs...)
}
