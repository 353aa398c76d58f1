package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/store"
)

// StorePolicy is the policy a store whose recorded policy is cur holds once
// the file's [store] applies, and the fields that changes: each key the
// file sets takes the file's value, every other field keeps cur's.
// A policy that would not hold is errdefs.ErrInvalidArgument naming the
// field.
func (c *Config) StorePolicy(cur store.Policy) (store.Policy, []store.PolicyChange, error) {
	p, changes, err := cur.Overlay(c.Store, c.StoreKeys)
	if err == nil {
		err = p.Validate()
	}
	if err == nil {
		err = evict.CheckPolicy(p)
	}
	if err != nil {
		return cur, nil, fmt.Errorf("%s: [store] cannot apply to the store: %w", c.name(), err)
	}
	return p, changes, nil
}

// ApplyStore records the file's [store] in the domain's policy
// (domain-policy.json) and logs each field that changes, old and new.
// weightsnapd and the CLI call it each time they open the store, before
// anything reads its policy. A process without permission to write the
// store warns and keeps the recorded policy.
func (c *Config) ApplyStore(ctx context.Context, d *store.Domain) error {
	p, changes, err := c.StorePolicy(d.Policy())
	if err != nil || len(changes) == 0 {
		return err
	}
	if err := d.SetPolicy(p); errors.Is(err, fs.ErrPermission) {
		// A user who may read the store but not write it (weightsnap ls
		// beside a root daemon) goes on under the recorded policy.
		log.G(ctx).WithError(err).WithField("config", c.name()).Warn("the store's policy differs from [store] and this process may not record it: the next start of weightsnapd does")
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: [store]: %w", c.name(), err)
	}
	for _, ch := range changes {
		log.G(ctx).WithField("config", c.name()).WithField("field", ch.Field).WithField("old", ch.Old).WithField("new", ch.New).
			Info("store policy changed by the configuration file")
	}
	return nil
}

// name labels the file in messages: its path, or "the defaults".
func (c *Config) name() string {
	if c.Path == "" {
		return "the defaults"
	}
	return c.Path
}
