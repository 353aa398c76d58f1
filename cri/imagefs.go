package cri

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"
	"github.com/containerd/platforms"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Telling the kubelet the truth: its image garbage collection counts each
// image's size from ListImages, never removes one the runtime reports
// pinned, and reads the image filesystem ImageFsInfo names. A weight
// image's bytes are its artifacts', in the store, on the store's
// filesystem; containerd's answer covers none of it.

// weightIDs remembers the artifacts each image (by id) needs: images are
// immutable, so an id's answer never changes.
type weightIDs struct {
	mu   sync.Mutex
	byID map[string][]artifact.ID
}

// artifactsOf lists the identities the pointer layers of the CRI image
// img name (none for an ordinary image, or one containerd cannot read).
func (s *Service) artifactsOf(ctx context.Context, img *runtime.Image) []artifact.ID {
	s.weights.mu.Lock()
	ids, ok := s.weights.byID[img.GetId()]
	s.weights.mu.Unlock()
	if ok {
		return ids
	}
	nctx := namespaces.WithNamespace(ctx, Namespace)
	names := append([]string{img.GetId()}, append(img.GetRepoDigests(), img.GetRepoTags()...)...)
	for _, n := range names {
		ci, err := s.ctd.ImageService().Get(nctx, n)
		if err != nil {
			continue
		}
		m, err := images.Manifest(nctx, s.ctd.ContentStore(), ci.Target, platforms.Default())
		if err != nil {
			return nil
		}
		for _, l := range m.Layers {
			if p, ok, err := pointer.ParseLabels(l.Annotations); ok && err == nil {
				ids = append(ids, p.ID)
			}
		}
		s.weights.mu.Lock()
		s.weights.byID[img.GetId()] = ids
		s.weights.mu.Unlock()
		return ids
	}
	return nil
}

// annotate adds to img the bytes its artifacts take in the store and marks
// it pinned when one of them is.
func (s *Service) annotate(ctx context.Context, d *store.Domain, img *runtime.Image) {
	for _, id := range s.artifactsOf(ctx, img) {
		u := d.UseOf(id)
		img.Size = img.GetSize() + uint64(max(u.Bytes, 0))
		if u.Pinned() {
			img.Pinned = true
		}
	}
}

// ListImages implements runtime.ImageServiceServer: containerd's images, as the store sees them.
// A weight image's size includes its artifacts' bytes.
// It is pinned when one of its artifacts is.
func (s *Service) ListImages(ctx context.Context, req *runtime.ListImagesRequest) (*runtime.ListImagesResponse, error) {
	resp, err := s.upstream.ListImages(ctx, req)
	if err != nil {
		return nil, err
	}
	if d, derr := s.cfg.Runtime.Domain(ctx); derr == nil {
		for _, img := range resp.GetImages() {
			s.annotate(ctx, d, img)
		}
	}
	return resp, nil
}

// ImageStatus implements runtime.ImageServiceServer: as ListImages.
func (s *Service) ImageStatus(ctx context.Context, req *runtime.ImageStatusRequest) (*runtime.ImageStatusResponse, error) {
	resp, err := s.upstream.ImageStatus(ctx, req)
	if err != nil || resp.GetImage() == nil {
		return resp, err
	}
	if d, derr := s.cfg.Runtime.Domain(ctx); derr == nil {
		s.annotate(ctx, d, resp.GetImage())
	}
	return resp, nil
}

// RemoveImage implements runtime.ImageServiceServer: forwarded, then the eviction policy told.
//
// Once the last image that needs an artifact is gone, the artifact is the
// first eviction candidate (evict.Policy.Demote). It is evicted at once when
// the store's filesystem is past the low watermark (evict.Policy.Unneeded).
func (s *Service) RemoveImage(ctx context.Context, req *runtime.RemoveImageRequest) (*runtime.RemoveImageResponse, error) {
	var needed []artifact.ID
	if st, err := s.upstream.ImageStatus(ctx, &runtime.ImageStatusRequest{Image: req.GetImage()}); err == nil && st.GetImage() != nil {
		needed = s.artifactsOf(ctx, st.GetImage())
	}
	resp, err := s.upstream.RemoveImage(ctx, req)
	if err != nil || len(needed) == 0 {
		return resp, err
	}
	ev, everr := s.cfg.Runtime.Eviction(ctx)
	list, lerr := s.upstream.ListImages(ctx, &runtime.ListImagesRequest{})
	if everr != nil || lerr != nil {
		return resp, nil
	}
	still := map[artifact.ID]bool{}
	for _, img := range list.GetImages() {
		for _, id := range s.artifactsOf(ctx, img) {
			still[id] = true
		}
	}
	demoted := false
	for _, id := range needed {
		if still[id] {
			continue
		}
		if err := ev.Demote(id); err != nil {
			log.G(ctx).WithError(err).WithField("id", id).Debug("cri: artifact not demoted")
			continue
		}
		demoted = true
		log.G(ctx).WithField("id", id).Info("cri: the last image that needs the artifact was removed: it is the first eviction candidate")
	}
	// The kubelet removes images to get their space back, and was told an
	// image's size includes its artifacts': past the low watermark, the
	// store gives it back now.
	if demoted {
		if rep, err := ev.Unneeded(ctx); err != nil {
			log.G(ctx).WithError(err).Warn("cri: eviction after an image removal failed")
		} else if rep != nil {
			log.G(ctx).WithField("evicted", len(rep.Evicted)).WithField("freed_bytes", rep.Freed).Info("cri: store past the low watermark after an image removal: evicted")
		}
	}
	return resp, nil
}

// ImageFsInfo implements runtime.ImageServiceServer: the store's filesystem first, then containerd's.
// The store's filesystem also holds the weight snapshots.
// Its entry has its mountpoint and the bytes and inodes they use, each inode once.
func (s *Service) ImageFsInfo(ctx context.Context, req *runtime.ImageFsInfoRequest) (*runtime.ImageFsInfoResponse, error) {
	resp, err := s.upstream.ImageFsInfo(ctx, req)
	if err != nil {
		return nil, err
	}
	d, err := s.cfg.Runtime.Domain(ctx)
	if err != nil {
		return resp, nil
	}
	var dirs []string
	if s.cfg.SnapshotRoot != "" {
		dirs = append(dirs, s.cfg.SnapshotRoot)
	}
	u, err := d.FSUsage(dirs...)
	if err != nil {
		log.G(ctx).WithError(err).Warn("cri: the store's filesystem could not be measured; answering containerd's image filesystem")
		return resp, nil
	}
	ours := &runtime.FilesystemUsage{Timestamp: time.Now().UnixNano(), FsId: &runtime.FilesystemIdentifier{Mountpoint: u.Mountpoint},
		UsedBytes: &runtime.UInt64Value{Value: uint64(u.UsedBytes)}, InodesUsed: &runtime.UInt64Value{Value: uint64(u.InodesUsed)}}
	fss := []*runtime.FilesystemUsage{ours}
	for _, f := range resp.GetImageFilesystems() {
		if f.GetFsId().GetMountpoint() != u.Mountpoint {
			fss = append(fss, f)
		}
	}
	resp.ImageFilesystems = fss
	return resp, nil
}
