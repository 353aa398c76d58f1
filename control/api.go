// Package control is weightsnapd's control API for the weightsnap CLI,
// HTTP/JSON on a unix socket.
//
// The daemon serves its Services with Listen: host mounts and what holds
// an artifact (the snapshotter's), prefetch entries' states, the post-load
// publication of a compile cache, and its store as its eviction policy
// sees it, with evictions on demand. The CLI calls them through a
// Client. The socket's mode is 0660.
//
//	POST   /v1/mounts              HostMountRequest -> HostMountInfo
//	DELETE /v1/mounts?dir=DIR      -> 204
//	GET    /v1/mounts              -> []HostMountInfo
//	GET    /v1/holders?identity=ID -> Holders
//	GET    /v1/prefetch            -> []prefetch.Status
//	POST   /v1/publish             PublishRequest -> PublishResult
//	GET    /v1/store               -> StoreInfo
//	GET    /v1/use                 -> []store.ArtifactInfo
//	POST   /v1/evict               EvictRequest -> evict.Report
//
// An error answers its errdefs class as the HTTP status (errhttp) and
// {"error": message}.
package control

import (
	"context"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
)

// HostMountRequest asks for a host mount.
type HostMountRequest struct {
	ID       artifact.ID `json:"identity"`
	Artifact string      `json:"artifact,omitempty"` // a digest-pinned reference to resolve it from; "" for the store and the configured sources
	Dir      string      `json:"dir"`                // the absolute mount point; for layout "hf" the cache root, the mount point being its repository folder
	// Layout is "" for the artifact's own files, or "hf" for a Hugging Face
	// cache repository folder of the repo id Repo (pointer.CheckLayout).
	Layout string `json:"layout,omitempty"`
	Repo   string `json:"repo,omitempty"`
	// Writable mounts an overlay of the view (lowerdir) and an upper
	// directory of the mount's own, so that an engine may write there (a
	// compile cache); writes copy up and never reach the store's files,
	// and the unmount drops them.
	Writable bool `json:"writable,omitempty"`
}

// HostMountInfo is a host mount; it is also the record the daemon keeps of
// it (mount.json).
type HostMountInfo struct {
	Dir      string      `json:"dir"`
	ID       artifact.ID `json:"identity"`
	Artifact string      `json:"artifact,omitempty"`
	Created  time.Time   `json:"created"`
	Leased   bool        `json:"leased"`           // false while a repair waits for the artifact
	Layout   string      `json:"layout,omitempty"` // as requested; Dir is then the repository folder
	Repo     string      `json:"repo,omitempty"`
	Writable bool        `json:"writable,omitempty"` // an overlay over the view, as requested
}

// Holders is what holds an artifact in the snapshotter.
type Holders struct {
	ID        artifact.ID `json:"identity"`
	PID       int         `json:"pid"`                 // the daemon's process, as the store's lock holders name it
	Leased    bool        `json:"leased"`              // the daemon holds the artifact's lease
	Snapshots []string    `json:"snapshots,omitempty"` // active snapshots using it (containers, image volumes, views)
	Mounts    []string    `json:"mounts,omitempty"`    // host mount points with the lease
	Pending   []string    `json:"pending,omitempty"`   // snapshots (fallbacks, users) and mount points waiting for a repair
}

// HostMounts are the host mounts the control API serves; the snapshotter's
// HostMounts is one.
type HostMounts interface {
	// Mount makes a host mount.
	Mount(ctx context.Context, req HostMountRequest) (*HostMountInfo, error)
	// Unmount undoes the host mount on dir.
	Unmount(ctx context.Context, dir string) error
	// List lists the host mounts, by mount point.
	List() []HostMountInfo
	// HoldersOf says what holds the artifact identity.
	HoldersOf(identity artifact.ID) (*Holders, error)
}

// StoreInfo is the store a daemon serves.
type StoreInfo struct {
	Root string `json:"root"`
}

// EvictRequest asks a daemon to evict now, or with DryRun to say what it
// would evict.
type EvictRequest struct {
	// To is the bytes the store may hold afterwards (each inode once); nil
	// for the store's limits and watermarks.
	To     *int64 `json:"to_bytes,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// Services are what a daemon serves on its control API.
type Services struct {
	// Mounts serves the host mount and holder routes.
	Mounts HostMounts
	// Prefetch answers GET /v1/prefetch: the prefetch entries' states, a
	// []prefetch.Status. Nil answers an empty list.
	Prefetch func() any
	// Publish answers POST /v1/publish: the post-load publication of what
	// a started engine made. Nil refuses it (errdefs.ErrNotImplemented).
	Publish func(ctx context.Context, req PublishRequest) (*PublishResult, error)
	// Store answers GET /v1/store. Nil refuses it, as it does Use and Evict
	// (errdefs.ErrNotImplemented).
	Store func() StoreInfo
	// Use answers GET /v1/use: the store's artifacts as the daemon's
	// eviction policy sees them, a []*store.ArtifactInfo whose use counts
	// in the bytes an eviction frees what the releasers let go of first.
	Use func(ctx context.Context) (any, error)
	// Evict answers POST /v1/evict: the daemon's eviction now, or what it
	// would evict, an *evict.Report.
	Evict func(ctx context.Context, req EvictRequest) (any, error)
}
