package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/trust"
)

// omsCheck is the check of an import of dir (of the model repository
// repo) against its model.sig, an OpenSSF model-signing bundle: nil when
// there is none and the policy wants none. The scope is repo's when it is
// a registry repository (host/repo), else the policy's default. Under a
// scope that requires a signature, a missing model.sig refuses the import
// before a byte is copied, and the bundle must be signed by a key or
// identity the scope trusts; either way its statement must name exactly
// the files the store computed (their sha256, or blake3 where the bundle
// says so), save its ignore_paths. The check runs before publication;
// verified is set to how the policy was met.
func omsCheck(a *app, dir, repo string, verified *[]trust.Verified) (func([]artifact.FileEntry) error, error) {
	pol, err := a.cfg.Verify.LoadPolicy()
	if err != nil {
		return nil, err
	}
	m, err := pol.MatchRef(repo)
	if err != nil || repo == "" {
		m = trust.Match{Scope: "default", Requirements: pol.Default}
	}
	path := filepath.Join(dir, trust.OMSSignatureFile)
	raw, err := artifact.ReadFileAtMost(path, trust.MaxBundleBytes)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil, nil // not a directory: the import says so
	case errors.Is(err, fs.ErrNotExist):
		if m.Requires() {
			return nil, &trust.Refusal{Scope: m.Scope, Reason: fmt.Sprintf("no %s beside the files of %s: sigstoreSigned is required", trust.OMSSignatureFile, dir)}
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func(files []artifact.FileEntry) error {
		idx := &artifact.Index{Schema: artifact.IndexSchema, Files: files}
		if m.Requires() {
			v, err := trust.VerifyOMS(m, trust.Signature{Source: path, Raw: raw}, idx, time.Now().UTC())
			*verified = v
			return err
		}
		o, err := trust.ParseOMS(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := o.CheckFiles(idx); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		*verified = []trust.Verified{{Scope: m.Scope, Type: trust.TypeAcceptAnything, Time: time.Now().UTC()}}
		return nil
	}, nil
}
