// Package cri is weightsnapd's CRI image service: runtime.v1.ImageService
// on its own socket, forwarded to containerd's CRI, keeping the pull
// credentials of PullImage in memory for the weight layers that pull
// resolves (Credentials), and answering a pull of an artifact (ModelPack,
// plain oras) with a local weights-only image, so that any artifact is a
// Kubernetes image volume.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/unixserve"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/resolve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Config is what the service needs from the node.
type Config struct {
	// Upstream is containerd's socket: its CRI, its content and image stores.
	Upstream string
	// Runtime resolves an artifact pulled through the service into the store.
	Runtime *resolve.Runtime
	// Credentials keep the pull credentials; the runtime's registry options
	// consult them (registry.Options.Credentials = Credentials.Lookup).
	Credentials *Credentials
	// Registries are the hosts whose references are looked at for artifacts
	// ([resolve] registries); any other pull is forwarded as it is.
	Registries []string
	// Remote are the registry client options, Credentials set.
	Remote registry.Options
	// SnapshotRoot is the snapshotter's root, on the store's filesystem:
	// ImageFsInfo counts its bytes with the store's.
	SnapshotRoot string
}

// Service is the CRI image service.
type Service struct {
	runtime.UnimplementedImageServiceServer
	cfg      Config
	conn     *grpc.ClientConn
	upstream runtime.ImageServiceClient
	ctd      *client.Client
	weights  weightIDs // the artifacts each image needs (imagefs.go)
}

// New connects (lazily) to containerd at cfg.Upstream.
func New(cfg Config) (*Service, error) {
	// Calls wait for containerd (within their own deadlines: the kubelet
	// sets them) rather than fail at once while the connection backs off,
	// which failed a pull made just after containerd came up.
	conn, err := grpc.NewClient("unix://"+cfg.Upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second}}))
	if err != nil {
		return nil, fmt.Errorf("cri upstream %s: %w", cfg.Upstream, err)
	}
	ctd, err := client.NewWithConn(conn, client.WithDefaultNamespace(Namespace))
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Service{cfg: cfg, conn: conn, upstream: runtime.NewImageServiceClient(conn), ctd: ctd,
		weights: weightIDs{byID: map[string][]artifact.ID{}}}, nil
}

// Listen serves s on the unix socket at path (mode 0660).
func Listen(ctx context.Context, path string, s *Service) (*unixserve.Server, error) {
	return unixserve.ListenGRPC(ctx, path, func(srv *grpc.Server) { runtime.RegisterImageServiceServer(srv, s) })
}

// Close closes the connection to containerd.
func (s *Service) Close() error { return s.conn.Close() }

// StreamImages implements runtime.ImageServiceServer: forwarded.
func (s *Service) StreamImages(req *runtime.StreamImagesRequest, out grpc.ServerStreamingServer[runtime.StreamImagesResponse]) error {
	in, err := s.upstream.StreamImages(out.Context(), req)
	if err != nil {
		return err
	}
	for {
		r, err := in.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := out.Send(r); err != nil {
			return err
		}
	}
}

// PullImage implements runtime.ImageServiceServer. Its credentials are kept
// (Credentials) before anything else, since containerd prepares the weight
// layers of the image while it pulls; a pull that fails unauthorized drops
// them again. An artifact of a configured registry is pulled into the store
// and answered with a weights-only image; anything else is forwarded.
func (s *Service) PullImage(ctx context.Context, req *runtime.PullImageRequest) (*runtime.PullImageResponse, error) {
	name := req.GetImage().GetImage()
	ref, err := registry.ParseReference(name)
	if err != nil {
		return s.upstream.PullImage(ctx, req) // containerd says what is wrong with it
	}
	cred, has, err := credentialOf(req.GetAuth())
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if has {
		s.cfg.Credentials.Put(ref.Registry, ref.Repository, cred)
	}
	resp, err := s.pull(ctx, req, name)
	if err != nil && has && unauthorized(err) {
		s.cfg.Credentials.Forget(ref.Registry, ref.Repository, cred)
	}
	return resp, err
}

func (s *Service) pull(ctx context.Context, req *runtime.PullImageRequest, name string) (*runtime.PullImageResponse, error) {
	ref, _ := registry.ParseReference(name)
	if !oci.AllowedHost(s.cfg.Registries, ref.Registry) {
		return s.upstream.PullImage(ctx, req)
	}
	r, err := registry.New(ctx, name, s.cfg.Remote)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	res, isArtifact, err := oci.FetchArtifact(ctx, r)
	if err != nil {
		// containerd's own pull reports it as a kubelet expects (an
		// unauthorized or missing image).
		log.G(ctx).WithError(err).WithField("image", name).Debug("cri: the manifest could not be read; forwarding the pull")
		return s.upstream.PullImage(ctx, req)
	}
	if !isArtifact {
		return s.upstream.PullImage(ctx, req)
	}
	id, err := s.pullArtifact(ctx, r, res)
	if err != nil {
		log.G(ctx).WithError(err).WithField("image", name).Warn("cri: pull of an artifact failed")
		return nil, errgrpc.ToGRPC(err)
	}
	return &runtime.PullImageResponse{ImageRef: id}, nil
}

// unauthorized says whether a pull failed for its credentials: containerd's
// CRI reports the registry's 401 in its message, with no class of its own.
func unauthorized(err error) bool {
	if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
		return true
	}
	if errdefs.IsUnauthorized(errgrpc.ToNative(err)) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unauthorized") || strings.Contains(msg, "401")
}
