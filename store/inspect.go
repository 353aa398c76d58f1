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
// Its states hold every byte under the root, each inode once.
type DomainReport struct {
	Root        string `json:"root"`
	FSType      string `json:"fs_type"`
	HostMemory  bool   `json:"host_memory"` // tmpfs: bytes are host memory, not disk
	Policy      Policy `json:"policy"`
	Ready       Usage  `json:"ready"`
	Temp        Usage  `json:"temp"`
	Quarantined Usage  `json:"quarantined"`
	Denied      Usage  `json:"denied"`
	Invalid     Usage  `json:"invalid"`
	Removing    Usage  `json:"removing"` // tombstones of removals
	Metadata    Usage  `json:"metadata"` // everything outside artifacts/, tmp/ and quarantine/
	// States lists the states above with what frees each one's bytes.
	States []StateUsage `json:"states"`
	// TotalBytes is the sum of the states' bytes: every regular file
	// under the root, each inode once.
	TotalBytes int64        `json:"total_bytes"`
	FreeBytes  int64        `json:"free_bytes"`
	Locks      []LockHolder `json:"locks,omitempty"`
}

// StateUsage is the entries and bytes of one state, and what frees them.
type StateUsage struct {
	State string `json:"state"`
	Usage
	FreedBy string `json:"freed_by"`
}

// InspectDomain returns a snapshot of the domain's usage and lock activity.
// An artifact's state is the one InspectArtifact (and so ls) gives it.
func (d *Domain) InspectDomain(ctx context.Context) (*DomainReport, error) {
	r := &DomainReport{Root: d.root, FSType: d.info.FSType, HostMemory: d.info.FSType == "tmpfs", Policy: d.policy}
	seen := map[inodeKey]bool{}
	add := func(u *Usage, p string) {
		u.Count++
		u.Bytes += treeUsage(p, seen).Bytes
	}
	arts, err := os.ReadDir(d.path(dirArtifacts))
	if err != nil {
		return nil, err
	}
	for _, e := range arts {
		p := d.path(dirArtifacts, e.Name())
		id, err := artifact.ParseIDHex(e.Name())
		if err != nil {
			add(&r.Removing, p) // a tombstone, or a name no artifact has
			continue
		}
		info, err := d.InspectArtifact(ctx, id)
		switch {
		case err != nil:
			continue // gone meanwhile
		case info.State == StateDenied:
			add(&r.Denied, p)
		case info.State == StateInvalid:
			add(&r.Invalid, p)
		default:
			add(&r.Ready, p)
		}
	}
	tmp, _ := os.ReadDir(d.path(dirTmp))
	for _, e := range tmp {
		if _, tomb := tombstoneOwner(e.Name()); tomb {
			add(&r.Removing, d.path(dirTmp, e.Name()))
		} else {
			add(&r.Temp, d.path(dirTmp, e.Name()))
		}
	}
	quarantined, _ := os.ReadDir(d.path(dirQuarantine))
	for _, e := range quarantined {
		add(&r.Quarantined, d.path(dirQuarantine, e.Name()))
	}
	top, _ := os.ReadDir(d.root)
	for _, e := range top {
		if n := e.Name(); n != dirArtifacts && n != dirTmp && n != dirQuarantine {
			add(&r.Metadata, d.path(n))
		}
	}
	r.States = []StateUsage{
		{State: "ready", Usage: r.Ready, FreedBy: "eviction (weightsnap gc --evict) or weightsnap rm, once no lease, pin or build holds it"},
		{State: "temp", Usage: r.Temp, FreedBy: "the build that writes it; an interrupted one is continued by its artifact's next build, or removed by gc after stale_build_seconds (gc --all: at once)"},
		{State: "removing", Usage: r.Removing, FreedBy: "the next open, gc, eviction, removal or build (an interrupted removal)"},
		{State: "denied", Usage: r.Denied, FreedBy: "gc or the artifact's next build, which move it to quarantine, then as quarantined"},
		{State: "invalid", Usage: r.Invalid, FreedBy: "gc or the artifact's next build, which move it to quarantine, then as quarantined"},
		{State: "quarantined", Usage: r.Quarantined, FreedBy: fmt.Sprintf("gc, once older than quarantine_max_age_seconds (%d)", d.policy.QuarantineMaxAgeSeconds)},
		{State: "metadata", Usage: r.Metadata, FreedBy: "nothing (kept with the store): locks, uses, pins, deny markers, signature records and the domain's files"},
	}
	for _, s := range r.States {
		r.TotalBytes += s.Bytes
	}
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
