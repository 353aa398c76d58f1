package config

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"
)

// CRI is the [cri] table: weightsnapd's CRI image service.
type CRI struct {
	Address  string `toml:"address" comment:"unix socket of the CRI image service (the kubelet's imageServiceEndpoint), mode 0660; \"\" turns it off"`
	Upstream string `toml:"upstream" comment:"containerd's socket: the CRI it forwards to, and the image store a pulled artifact's weights-only image goes to"`
	// CredentialSeconds is how long the registry's acceptance of a pull's
	// credentials for a repository is kept (the credentials themselves are
	// kept by nobody: it once meant how long they were).
	CredentialSeconds int `toml:"credential_seconds" comment:"seconds the registry's acceptance of a PullImage's own credentials for a repository is kept (in memory,\nunder a hash of the credentials, never the secret) before a pull answered from the node's store asks the\nregistry again; 0 asks at every pull. A pull's credentials serve that pull alone."`
	// UnpackCheckSeconds is how often containerd's images are looked at for
	// weight images another snapshotter unpacked.
	UnpackCheckSeconds int `toml:"unpack_check_seconds" comment:"seconds between looks at containerd's images (through upstream) for weight images another snapshotter\nunpacked, whose containers see only the pointer files: each is logged and counted once; 0 turns it off"`
}

// DefaultCRI is the [cri] table's defaults.
func DefaultCRI() CRI {
	return CRI{Address: "/run/weightsnap/cri.sock", Upstream: "/run/containerd/containerd.sock", CredentialSeconds: 300, UnpackCheckSeconds: 30}
}

// CredentialTTL is credential_seconds as a duration.
func (c *CRI) CredentialTTL() time.Duration {
	return time.Duration(c.CredentialSeconds) * time.Second
}

func (c *CRI) validate() error {
	if c.Address == "" {
		return nil
	}
	if c.Upstream == "" {
		return fmt.Errorf("[cri] upstream: containerd's socket is required while [cri] address is set: %w", errdefs.ErrInvalidArgument)
	}
	if c.UnpackCheckSeconds < 0 {
		return fmt.Errorf("[cri] unpack_check_seconds %d: want 0 (off) or more: %w", c.UnpackCheckSeconds, errdefs.ErrInvalidArgument)
	}
	if c.CredentialSeconds < 0 {
		return fmt.Errorf("[cri] credential_seconds %d: want 0 (ask the registry at every pull) or more: %w", c.CredentialSeconds, errdefs.ErrInvalidArgument)
	}
	return nil
}
