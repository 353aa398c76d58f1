package cri

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"golang.org/x/sync/errgroup"
)

// Namespace is containerd's namespace of the CRI's images.
const Namespace = "k8s.io"

// criImageLabel marks an image as the CRI's (containerd's CRI sets it on
// the images it pulls).
const criImageLabel = "io.cri-containerd.image"

// pullArtifact resolves the artifact r names into the store (the store,
// the weight peers, then its registry with the pull's credentials), then
// writes its weights-only image (oci.WeightsOnlyImage: the artifact at
// oci.ArtifactTarget) to containerd under the pulled name, and returns the
// image id. Only the image config, the pointer layer and the manifest go
// to containerd's content store: no weight byte.
func (s *Service) pullArtifact(ctx context.Context, r *registry.Remote, res *oci.Resolved) (string, error) {
	plan, err := oci.PlanArtifact(ctx, r, res)
	if err != nil {
		return "", err
	}
	id, err := plan.Identity.ID()
	if err != nil {
		return "", err
	}
	digestRef := r.Name() + "@" + res.Desc.Digest.String()
	resn, err := s.cfg.Runtime.Resolve(ctx, resolve.Request{Identity: &plan.Identity, Artifact: digestRef})
	if err != nil {
		return "", err
	}
	defer resn.Close() // the snapshot of the image takes its own lease
	ptr := pointer.Pointer{Artifact: digestRef, ID: id, Target: oci.ArtifactTarget, Files: len(plan.Files), Bytes: plan.TotalBytes()}
	if resn.Lease != nil { // a tar layer's files are known once extracted
		ptr.Files, ptr.Bytes = len(resn.Lease.Index.Files), resn.Lease.Index.TotalBytes()
	}
	img, pl, err := oci.WeightsOnlyImage(ptr)
	if err != nil {
		return "", err
	}
	if err := s.createImage(namespaces.WithNamespace(ctx, Namespace), r.String(), img, pl); err != nil {
		return "", err
	}
	log.G(ctx).WithField("image", r.String()).WithField("artifact", digestRef).WithField("id", id.String()).
		WithField("outcome", resn.Report.Outcome).Info("cri: artifact pulled as a weights-only image")
	return img.ConfigDesc.Digest.String(), nil
}

// createImage writes img's blobs to containerd's content store (the
// manifest labelled so that containerd's garbage collector keeps the
// others) and files it under name, its repo digest and its id, as
// containerd's CRI files a pulled image. The blobs are written under a
// lease, dropped once the images name them: a collection between the two
// (an eviction's image removal schedules one) would take them.
func (s *Service) createImage(ctx context.Context, name string, img *oci.Image, pl *oci.PointerLayer) (err error) {
	ctx, done, err := s.ctd.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour))
	if err != nil {
		return fmt.Errorf("containerd lease: %w", err)
	}
	defer func() {
		if derr := done(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = fmt.Errorf("containerd lease: %w", derr)
		}
	}()
	cs := s.ctd.ContentStore()
	blobs := []struct {
		desc   ocispec.Descriptor
		data   []byte
		labels map[string]string
	}{
		{img.ConfigDesc, img.Config, nil},
		{pl.Desc, pl.Tar, nil},
		{img.ManifestDesc, img.Manifest, map[string]string{
			"containerd.io/gc.ref.content.config": img.ConfigDesc.Digest.String(),
			"containerd.io/gc.ref.content.l.0":    pl.Desc.Digest.String(),
		}},
	}
	for _, b := range blobs {
		desc := ocispec.Descriptor{MediaType: b.desc.MediaType, Digest: b.desc.Digest, Size: b.desc.Size}
		if err := content.WriteBlob(ctx, cs, "weightsnap-cri-"+b.desc.Digest.String(), bytes.NewReader(b.data), desc,
			content.WithLabels(b.labels)); err != nil && !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("containerd content store: %w", err)
		}
	}
	named, err := reference.ParseDockerRef(name)
	if err != nil {
		return fmt.Errorf("image name %q: %w: %w", name, err, errdefs.ErrInvalidArgument)
	}
	names := []string{named.String(), named.Name() + "@" + img.ManifestDesc.Digest.String(), img.ConfigDesc.Digest.String()}
	is := s.ctd.ImageService()
	for _, n := range names {
		im := images.Image{Name: n, Target: img.ManifestDesc, Labels: map[string]string{criImageLabel: "managed"}}
		if _, err := is.Create(ctx, im); err != nil {
			if !errdefs.IsAlreadyExists(err) {
				return fmt.Errorf("containerd image %s: %w", n, err)
			}
			if _, err := is.Update(ctx, im, "target", "labels."+criImageLabel); err != nil {
				return fmt.Errorf("containerd image %s: %w", n, err)
			}
		}
	}
	return nil
}

// resolveWeights checks, for each weight layer of the image res (its
// pointer's artifact on a configured registry), that the registry accepts
// the pull's credentials for the artifact's repository (Access: a manifest
// HEAD, no payload), then resolves the artifacts into the store with them,
// all at once, so that the snapshotter, which prepares the layers while
// containerd pulls and knows no pull's credentials, finds them there. A
// refusal fails the pull with the registry's answer before anything is
// fetched. A pointer to another host is left to the snapshotter, which
// refuses it.
func (s *Service) resolveWeights(ctx context.Context, r *registry.Remote, res *oci.Resolved) error {
	var ptrs []pointer.Pointer
	for _, l := range res.Manifest.Layers {
		p, ok, err := oci.PointerFromAnnotations(l)
		if err != nil || !ok || !oci.AllowedHost(s.cfg.Registries, pointer.Host(p)) {
			continue // a bad pointer is the snapshotter's to refuse, as for any pull
		}
		ar, err := r.Sibling(p.Artifact)
		if err != nil {
			return err
		}
		if err := s.access.Check(ctx, ar); err != nil {
			return refusal(ctx, r, ar, p, err)
		}
		ptrs = append(ptrs, p)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range ptrs {
		g.Go(func() error {
			resn, err := s.cfg.Runtime.Resolve(gctx, resolve.Request{ID: p.ID, Artifact: p.Artifact})
			if err != nil {
				if refused(err) || s.modeOf(p) != resolve.Preferred {
					return fmt.Errorf("weights of %s: artifact %s: %w", r, p.Artifact, err)
				}
				log.G(ctx).WithError(err).WithField("image", r.String()).WithField("artifact", p.Artifact).
					Warn("cri: weights of an image could not be resolved; preferred mode: its containers start without them")
				return nil
			}
			resn.Close() // the artifact stays in the store; the snapshot takes its own lease
			log.G(ctx).WithField("image", r.String()).WithField("artifact", p.Artifact).WithField("id", p.ID.String()).
				WithField("outcome", resn.Report.Outcome).Info("cri: weights of an image resolved with the pull's credentials")
			return nil
		})
	}
	return g.Wait()
}

// refusal is the error of a weight layer whose artifact ar the registry
// did not let the pull's credentials read: it names the registry, whose
// credentials they were and its answer.
func refusal(ctx context.Context, r, ar *registry.Remote, p pointer.Pointer, err error) error {
	if !refused(err) {
		return fmt.Errorf("weights of %s: artifact %s: %w", r, p.Artifact, err)
	}
	whose := "the pull's own credentials"
	if _, ok := registry.CredentialOf(ctx, ar.Ref.Registry); !ok {
		whose = "the node's Docker config (the pull brought no credentials for " + ar.Ref.Registry + ")"
	}
	answer := "forbidden"
	if errdefs.IsUnauthorized(err) {
		answer = "unauthorized"
	}
	return fmt.Errorf("weights of %s: registry %s refused %s for %s (%s): %w", r, ar.Ref.Registry, whose, ar.Name(), answer, err)
}

// refused says whether err is a registry's refusal of credentials.
func refused(err error) bool { return errdefs.IsUnauthorized(err) || errdefs.IsPermissionDenied(err) }

// modeOf is the mode of a weight layer: its image's, else the node's.
func (s *Service) modeOf(p pointer.Pointer) resolve.Mode {
	if p.Mode != "" {
		return resolve.Mode(p.Mode)
	}
	return s.cfg.Mode
}
