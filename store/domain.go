package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"golang.org/x/sys/unix"
)

// DomainSchema is the version of the domain layout.
const DomainSchema = 1

// ValidationMode is how much a lookup checks before it returns a lease.
type ValidationMode string

// Validation modes.
const (
	// ManifestAndMetadata checks identity, sizes, tensor keys, shapes, dtypes and offsets.
	ManifestAndMetadata ValidationMode = "manifest_and_metadata"
	// FullChecksum also checks every payload hash.
	FullChecksum ValidationMode = "full_checksum"
)

// Policy is a domain's validation, capacity and coordination policy (domain-policy.json).
type Policy struct {
	Validation                 ValidationMode `json:"validation" toml:"validation" comment:"lookup validation: manifest_and_metadata or full_checksum"`
	MaxArtifactBytes           bytefmt.Size   `json:"max_artifact_bytes" toml:"max_artifact_bytes" comment:"largest artifact accepted (0: no limit)"`
	MaxStoreBytes              bytefmt.Size   `json:"max_store_bytes" toml:"max_store_bytes" comment:"largest store (0: no limit)"`
	MinFreeBytes               bytefmt.Size   `json:"min_free_bytes" toml:"min_free_bytes" comment:"free bytes a build must leave on the filesystem"`
	CoordinationTimeoutSeconds int            `json:"coordination_timeout_seconds" toml:"coordination_timeout_seconds" comment:"seconds to wait for another process's lock"`
	// QuarantineMaxAgeSeconds is how long gc keeps quarantined entries for inspection.
	QuarantineMaxAgeSeconds int `json:"quarantine_max_age_seconds" toml:"quarantine_max_age_seconds" comment:"seconds gc keeps quarantined entries"`
	// StaleBuildSeconds is how long an interrupted build is kept for the
	// next build of its artifact to continue (gc --all removes it sooner).
	StaleBuildSeconds int `json:"stale_build_seconds" toml:"stale_build_seconds" comment:"seconds gc and other builds keep an interrupted build, for the next pull or fetch of its artifact to continue (gc --all removes it sooner)"`
	// Eviction, HighWatermarkPercent and LowWatermarkPercent are the
	// eviction policy's (package evict); the store keeps them and reads none.
	Eviction             string `json:"eviction" toml:"eviction" comment:"lru: a build that would cross max_store_bytes or min_free_bytes evicts unleased, unpinned\nartifacts, least recently used first; off: it is refused"`
	HighWatermarkPercent int    `json:"high_watermark_percent" toml:"high_watermark_percent" comment:"weightsnapd evicts when the store's filesystem is fuller than this (percent; 0: never)"`
	LowWatermarkPercent  int    `json:"low_watermark_percent" toml:"low_watermark_percent" comment:"... down to this (percent)"`
}

// DefaultPolicy is the policy of a domain created without one.
func DefaultPolicy() Policy {
	return Policy{Validation: ManifestAndMetadata, CoordinationTimeoutSeconds: 600, QuarantineMaxAgeSeconds: 7 * 24 * 3600, StaleBuildSeconds: 24 * 3600,
		Eviction: "lru", HighWatermarkPercent: 85, LowWatermarkPercent: 75}
}

// Validate checks the values the type system does not.
func (p Policy) Validate() error {
	switch {
	case p.Validation != ManifestAndMetadata && p.Validation != FullChecksum:
		return fmt.Errorf("policy: unknown validation mode %q: %w", p.Validation, errdefs.ErrInvalidArgument)
	case p.MaxArtifactBytes < 0 || p.MaxStoreBytes < 0 || p.MinFreeBytes < 0 || p.QuarantineMaxAgeSeconds < 0 || p.StaleBuildSeconds < 0:
		return fmt.Errorf("policy: a negative capacity limit or age: %w", errdefs.ErrInvalidArgument)
	case p.CoordinationTimeoutSeconds <= 0:
		return fmt.Errorf("policy: coordination_timeout_seconds must be positive: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// CoordinationTimeout is the bound of every lock wait.
func (p Policy) CoordinationTimeout() time.Duration {
	return time.Duration(p.CoordinationTimeoutSeconds) * time.Second
}

// DomainInfo is domain.json.
type DomainInfo struct {
	Schema  int    `json:"schema"`
	FSType  string `json:"fs_type"`
	FSMagic string `json:"fs_magic"`
	Created string `json:"created"`
	Scope   string `json:"scope"`
}

// Domain is one store on one local filesystem.
type Domain struct {
	root    string
	info    DomainInfo
	policy  Policy
	created bool                  // this Open created the domain
	failed  atomic.Pointer[error] // set once the domain cannot mark invalid entries

	meta *metaCache                // decoded metadata of recent lookups (metacache.go)
	room atomic.Pointer[RoomMaker] // makes the room a build lacks (capacity.go)
}

// Open opens the domain at root, creating it with policy if there is none.
// A nil policy means DefaultPolicy.
// An existing domain keeps its recorded policy, which SetPolicy changes.
// The root's filesystem must be ext4, xfs, btrfs or tmpfs.
// Open finishes the removals a crash interrupted (tombstone.go).
func Open(ctx context.Context, root string, policy *Policy) (*Domain, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, rootError(root, err)
	}
	fsType, magic, err := checkFilesystem(root)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dirArtifacts, dirLocks, dirTmp, dirQuarantine, dirDeny} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("create store layout: %w", err)
		}
	}
	d := &Domain{root: root, meta: newMetaCache()}
	p := DefaultPolicy()
	if policy != nil {
		p = *policy
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.CoordinationTimeout())
	lk, err := lockFile(ctx, filepath.Join(root, dirLocks, lockDomain), unix.LOCK_EX, deadline, "the domain-init lock")
	if err != nil {
		return nil, err
	}
	defer lk.Close()
	info := DomainInfo{Schema: DomainSchema, FSType: fsType, FSMagic: fmt.Sprintf("0x%x", magic),
		Created: time.Now().UTC().Format(time.RFC3339), Scope: "node"}
	created, err := loadOrCreateJSON(root, fileDomain, &info)
	if err != nil {
		return nil, err
	}
	if info.Schema != DomainSchema {
		return nil, fmt.Errorf("domain %s has schema %d, this build reads %d: %w", root, info.Schema, DomainSchema, errdefs.ErrNotImplemented)
	}
	if _, err := loadOrCreateJSON(root, fileDomainPolicy, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("domain-policy.json: %w", err)
	}
	d.info, d.policy, d.created = info, p, created
	d.finishRemovals(ctx, artifact.ID{})
	return d, nil
}

// rootError is the failure to create the store root: a path that cannot
// hold a directory (under a missing or read-only parent, through a file,
// without permission) is errdefs.ErrInvalidArgument.
func rootError(root string, err error) error {
	for _, bad := range []error{fs.ErrNotExist, fs.ErrPermission, unix.ENOTDIR, unix.EROFS} {
		if errors.Is(err, bad) {
			return fmt.Errorf("store root %s cannot be created (--root or $WEIGHTSNAP_ROOT names another): %w: %w", root, err, errdefs.ErrInvalidArgument)
		}
	}
	return fmt.Errorf("create store root: %w", err)
}

// OpenExisting opens the domain at root as Open does, but only if there is
// one: a root that holds no store is errdefs.ErrNotFound, and nothing is
// created there. Read-only commands open their domain with it.
func OpenExisting(ctx context.Context, root string, policy *Policy) (*Domain, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(abs, fileDomain)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no store at %s (`weightsnap store init` creates one; --root or WEIGHTSNAP_ROOT names another): %w", abs, errdefs.ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("store root %s: %w", abs, err)
	}
	return Open(ctx, abs, policy)
}

// SetPolicy replaces the domain's stored policy.
func (d *Domain) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(p, "", "  ")
	if err := artifact.WriteFileAtomic(filepath.Join(d.root, fileDomainPolicy), raw, 0o644, artifact.Durable); err != nil {
		return err
	}
	d.policy = p
	return nil
}

// Root is the domain's directory.
func (d *Domain) Root() string { return d.root }

// Created says whether Open created the domain, finding none at root.
func (d *Domain) Created() bool { return d.created }

// Policy is the domain's policy.
func (d *Domain) Policy() Policy { return d.policy }

// Info is the domain's domain.json.
func (d *Domain) Info() DomainInfo { return d.info }

func (d *Domain) path(parts ...string) string {
	return filepath.Join(append([]string{d.root}, parts...)...)
}

// loadOrCreateJSON decodes root/name into v, or writes v there if it is
// absent (created says so).
func loadOrCreateJSON(root, name string, v any) (created bool, err error) {
	p := filepath.Join(root, name)
	raw, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		raw, _ = json.MarshalIndent(v, "", "  ")
		return true, artifact.WriteFileAtomic(p, raw, 0o644, artifact.Durable)
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("%s is corrupt: %w: %w", p, err, errdefs.ErrDataLoss)
	}
	return false, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
