package config

import (
	"fmt"

	"github.com/weightsnap/weightsnap/trust"
)

// Verify is the [verify] table.
type Verify struct {
	Policy string `toml:"policy" comment:"trust policy in containers-policy.json's format (scopes by registry, repository and tag; insecureAcceptAnything,\nreject, sigstoreSigned with keys or fulcio); no file at the default path accepts every artifact, reported as unverified"`
}

// LoadPolicy reads the [verify] policy file: `weightsnapd config check`
// and every command that verifies call it once.
func (v *Verify) LoadPolicy() (*trust.Policy, error) {
	p, err := trust.LoadPolicy(v.Policy)
	if err != nil {
		return nil, fmt.Errorf("[verify] policy: %w", err)
	}
	return p, nil
}
