package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/store"
)

// checkConfig is `weightsnapd config check`: it reads the configuration
// file at path and its [verify] policy file, says what is wrong with them
// (errdefs.ErrInvalidArgument), and what the file's [store] would change
// in the store at its root.
func checkConfig(w io.Writer, path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	p, err := cfg.Verify.LoadPolicy()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: ok\n", path)
	if err := checkStore(w, path, cfg); err != nil {
		return err
	}
	if p.Unverified {
		fmt.Fprintf(w, "%s: no policy file: artifacts are accepted unverified\n", cfg.Verify.Policy)
	} else {
		fmt.Fprintf(w, "%s: ok\n", cfg.Verify.Policy)
	}
	for _, warn := range p.Warnings() {
		fmt.Fprintf(w, "%s: warning: %s\n", cfg.Verify.Policy, warn)
	}
	return nil
}

// checkStore says what the file's [store] would change in the store at the
// configuration's root, which it reads and leaves as it is.
func checkStore(w io.Writer, path string, cfg config.Config) error {
	cur, err := store.ReadPolicy(cfg.Root)
	if errors.Is(err, errdefs.ErrNotFound) {
		fmt.Fprintf(w, "%s: no store at %s yet: [store] is its policy once one is created\n", path, cfg.Root)
		return nil
	}
	if err != nil {
		return err
	}
	_, changes, err := cfg.StorePolicy(cur)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		fmt.Fprintf(w, "%s: the store at %s holds [store] as it is\n", path, cfg.Root)
	}
	for _, ch := range changes {
		fmt.Fprintf(w, "%s: would change: %s\n", path, ch)
	}
	return nil
}
