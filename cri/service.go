// Package cri is weightsnapd's CRI image service, forwarded to containerd's CRI.
//
// It serves runtime.v1.ImageService on its own socket. A PullImage's own
// credentials serve that pull alone (registry.WithCredential). The registry
// is asked to accept them for every artifact the pull would get from the
// node's store (Access). The weight layers of an image are resolved with
// them before containerd pulls it. A pull of an artifact (ModelPack, plain
// oras) is answered with a local weights-only image, so that any artifact
// is a Kubernetes image volume.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/unixserve"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/resolve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Config is what the service needs from the node.
type Config struct {
	// Upstream is containerd's socket: its CRI, its content and image stores.
	Upstream string
	// Runtime resolves an artifact pulled through the service into the store.
	Runtime *resolve.Runtime
	// CredentialTTL is how long the registry's acceptance of a pull's
	// credentials for a repository is kept ([cri] credential_seconds); 0
	// asks the registry at every pull.
	CredentialTTL time.Duration
	// Registries are the hosts whose references are looked at for artifacts
	// and weight layers ([resolve] registries); any other pull is forwarded
	// as it is.
	Registries []string
	// Remote are the registry client options.
	Remote registry.Options
	// Mode is the node's [snapshotter] mode, which a weight image's own
	// mode overrides: in preferred mode a weight layer whose artifact the
	// pull could not resolve (for another reason than the registry's
	// refusal) is left to the snapshotter, which starts its container
	// without the weights.
	Mode resolve.Mode
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
	access   *Access
	weights  weightIDs // the artifacts each image needs (imagefs.go)
}

// New connects (lazily) to containerd at cfg.Upstream.
func New(cfg Config) (*Service, error) {
	access, err := NewAccess(cfg.CredentialTTL)
	if err != nil {
		return nil, err
	}
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
	return &Service{cfg: cfg, conn: conn, upstream: runtime.NewImageServiceClient(conn), ctd: ctd, access: access,
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

// PullImage implements runtime.ImageServiceServer with the pull's own credentials.
//
// The credentials, else the node's Docker config's, go with this pull's
// registry requests in ctx, and no other pull sees them. An artifact of a
// configured registry is pulled into the store and answered with a
// weights-only image. An image of a configured registry has the artifacts of
// its weight layers checked and resolved into the store before it is
// forwarded (resolveWeights). Anything else is forwarded.
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
		ctx = registry.WithCredential(ctx, ref.Registry, cred)
	}
	if !oci.AllowedHost(s.cfg.Registries, ref.Registry) {
		return s.upstream.PullImage(ctx, req)
	}
	r, err := registry.New(ctx, name, s.cfg.Remote)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	res, isArtifact, err := oci.FetchArtifact(ctx, r)
	if err != nil {
		// containerd's own pull, with the same credentials, reports it as
		// a kubelet expects (an unauthorized or missing image).
		log.G(ctx).WithError(err).WithField("image", name).Debug("cri: the manifest could not be read; forwarding the pull")
		return s.upstream.PullImage(ctx, req)
	}
	if !isArtifact {
		if err := s.resolveWeights(ctx, r, res); err != nil {
			log.G(ctx).WithError(err).WithField("image", name).Warn("cri: the weights of an image could not be pulled")
			return nil, errgrpc.ToGRPC(err)
		}
		return s.upstream.PullImage(ctx, req)
	}
	id, err := s.pullArtifact(ctx, r, res)
	if err != nil {
		log.G(ctx).WithError(err).WithField("image", name).Warn("cri: pull of an artifact failed")
		return nil, errgrpc.ToGRPC(err)
	}
	return &runtime.PullImageResponse{ImageRef: id}, nil
}
