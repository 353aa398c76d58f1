package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"golang.org/x/sys/unix"
)

// Artifact states in inspection snapshots.
const (
	StateReady   = "ready"
	StateDenied  = "denied"
	StateInvalid = "invalid"
)

// ArtifactInfo is a read-only snapshot of one artifact, without validation of payload bytes.
type ArtifactInfo struct {
	// ID is the artifact's ID, encoded as "digest" (sha256:<hex>) and its
	// hex as "id", as the artifact's directory is named.
	ID artifact.ID `json:"digest"`
	// ManifestDigest is sha256 of manifest.json, as READY.json seals it.
	ManifestDigest string `json:"manifest_digest,omitempty"`
	// Path is the artifact's directory: its payload files at their index
	// paths, beside its metadata. Read it, never write it (the files are
	// the store's, and hardlinked into snapshots).
	Path        string             `json:"path"`
	State       string             `json:"state"`
	Reason      string             `json:"reason,omitempty"`
	Identity    *artifact.Identity `json:"identity,omitempty"`
	Created     string             `json:"created,omitempty"`
	Producer    string             `json:"producer,omitempty"`
	TotalBytes  int64              `json:"total_bytes"`
	TensorCount int                `json:"tensor_count"`
	Files       []FileInfo         `json:"files,omitempty"`
	Holders     []LockHolder       `json:"lock_holders,omitempty"`
	// Use is what eviction sees: last use, pins, lease, the bytes it frees.
	Use *Use `json:"use,omitempty"`
}

// MarshalJSON is the snapshot's encoding: the ID's hex under "id" first,
// then the fields.
func (a ArtifactInfo) MarshalJSON() ([]byte, error) {
	type fields ArtifactInfo
	return jsonobj.Concat(struct {
		Hex string `json:"id"`
	}{a.ID.Hex()}, fields(a))
}

// FileInfo is one payload file in a snapshot.
type FileInfo struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Tensors int    `json:"tensors"`
}

// InspectArtifact returns a snapshot of artifacts/<id>. It takes no lock and
// checks the metadata only.
func (d *Domain) InspectArtifact(ctx context.Context, id artifact.ID) (*ArtifactInfo, error) {
	if id.IsZero() {
		return nil, errdefs.ErrInvalidArgument
	}
	if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); err != nil {
		return nil, ErrMiss
	}
	info := &ArtifactInfo{ID: id, Path: d.path(dirArtifacts, id.Hex()), State: StateReady,
		Holders: lockHolders(d.lockPath(id, "build"), d.lockPath(id, "artifact")), Use: d.UseOf(id)}
	if err := d.checkDenied(id); err != nil {
		info.State, info.Reason = StateDenied, err.(*DeniedError).Reason
	}
	o, err := d.validateDir(ctx, id, ManifestAndMetadata)
	if err != nil {
		if info.State == StateReady {
			info.State, info.Reason = StateInvalid, err.Error()
		}
		return info, nil
	}
	defer o.close()
	info.Identity, info.Created, info.Producer = &o.manifest.Identity, o.ready.Created, o.ready.Producer
	info.ManifestDigest = digest.NewDigestFromEncoded(digest.SHA256, o.ready.ManifestSHA256).String()
	info.TotalBytes, info.TensorCount = o.index.TotalBytes(), o.index.TensorCount()
	for _, f := range o.index.Files {
		info.Files = append(info.Files, FileInfo{Path: f.Path, Size: f.Size, SHA256: f.SHA256, Tensors: len(f.Tensors)})
	}
	return info, nil
}

// List returns a snapshot of every artifact directory, sorted by id.
func (d *Domain) List(ctx context.Context) ([]*ArtifactInfo, error) {
	ids, err := d.ids()
	if err != nil {
		return nil, err
	}
	out := make([]*ArtifactInfo, 0, len(ids))
	for _, id := range ids {
		if info, err := d.InspectArtifact(ctx, id); err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

// ids are the identities the artifact directories are named by, sorted.
func (d *Domain) ids() ([]artifact.ID, error) {
	entries, err := os.ReadDir(d.path(dirArtifacts))
	if err != nil {
		return nil, err
	}
	var ids []artifact.ID
	for _, e := range entries { // sorted by name: by hex
		if id, err := artifact.ParseIDHex(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// ExpandID turns a reference to a published artifact into its ID.
// The reference is a full ID ("sha256:<hex>"), its hex, or a unique prefix of the hex.
func (d *Domain) ExpandID(ref string) (artifact.ID, error) {
	if id, err := artifact.ParseID(ref); err == nil {
		ref = id.Hex()
	}
	if ref == "" || strings.Trim(ref, "0123456789abcdef") != "" {
		return artifact.ID{}, errors.Join(errdefs.ErrInvalidArgument, errors.New("artifact id must be hex: "+ref))
	}
	ids, err := d.ids()
	if err != nil {
		return artifact.ID{}, err
	}
	var match []artifact.ID
	for _, id := range ids {
		if strings.HasPrefix(id.Hex(), ref) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return artifact.ID{}, ErrMiss
	case 1:
		return match[0], nil
	}
	return artifact.ID{}, fmt.Errorf("id prefix %q names %d artifacts: %w", ref, len(match), errdefs.ErrInvalidArgument)
}

// Usage is a count and size of directory entries.
type Usage struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

// DomainReport is a read-only snapshot of a domain.
type DomainReport struct {
	Root        string       `json:"root"`
	FSType      string       `json:"fs_type"`
	HostMemory  bool         `json:"host_memory"` // tmpfs: bytes are host memory, not disk
	Policy      Policy       `json:"policy"`
	Ready       Usage        `json:"ready"`
	Temp        Usage        `json:"temp"`
	Quarantined Usage        `json:"quarantined"`
	Denied      Usage        `json:"denied"`
	FreeBytes   int64        `json:"free_bytes"`
	Locks       []LockHolder `json:"locks,omitempty"`
}

// InspectDomain returns a snapshot of the domain's usage and lock activity.
func (d *Domain) InspectDomain(ctx context.Context) (*DomainReport, error) {
	r := &DomainReport{Root: d.root, FSType: d.info.FSType, HostMemory: d.info.FSType == "tmpfs", Policy: d.policy}
	r.Ready = dirUsage(d.path(dirArtifacts))
	r.Temp = dirUsage(d.path(dirTmp))
	r.Quarantined = dirUsage(d.path(dirQuarantine))
	if entries, err := os.ReadDir(d.path(dirDeny)); err == nil {
		for _, e := range entries {
			if artifact.IsSHA256Hex(e.Name()) {
				r.Denied.Count++
				r.Denied.Bytes += dirUsage(d.path(dirArtifacts, e.Name())).Bytes
			}
		}
	}
	r.Ready.Bytes -= r.Denied.Bytes
	r.Ready.Count -= r.Denied.Count
	var st unix.Statfs_t
	if unix.Statfs(d.root, &st) == nil {
		r.FreeBytes = int64(st.Bavail) * st.Bsize
	}
	if locks, err := filepath.Glob(d.path(dirLocks, "*.lock")); err == nil {
		r.Locks = lockHolders(locks...)
	}
	return r, nil
}

// dirUsage counts the top-level entries of dir and the bytes of all files below it.
func dirUsage(dir string) Usage {
	var u Usage
	entries, _ := os.ReadDir(dir)
	u.Count = len(entries)
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				u.Bytes += fi.Size()
			}
		}
		return nil
	})
	return u
}
