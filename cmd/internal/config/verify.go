package config

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/trust"
)

// Verify is the [verify] table.
type Verify struct {
	Policy string `toml:"policy" comment:"trust policy in containers-policy.json's format (scopes by registry, repository and tag; insecureAcceptAnything,\nreject, sigstoreSigned with keys or fulcio); no file at the default path accepts every artifact, reported as unverified"`
}

// LoadPolicy reads the [verify] policy file: `weightsnapd config check`
// and every command that verifies call it once.
// A policy file the configuration names and that does not exist is
// errdefs.ErrInvalidArgument, as a missing configuration file is.
func (v *Verify) LoadPolicy() (*trust.Policy, error) {
	p, err := trust.LoadPolicy(v.Policy)
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		// trust's errors begin with "policy".
		return nil, fmt.Errorf("[verify] %w", err)
	}
	return p, nil
}
