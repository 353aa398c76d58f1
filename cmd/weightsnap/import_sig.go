package main

import (
	"context"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// modelSigCheck is the check of an import of dir (of the model
// repository repo: weightsnap import, a staged hub snapshot's
// publication) against its model.sig, an OpenSSF model-signing bundle,
// under pol (trust.ReadDirSignature: the scope is repo's when it is a
// registry repository, else the default; a scope that requires a
// signature refuses a directory without one here, before a byte is
// copied): nil when there is none. The check runs before publication,
// against the digests the store computed; it keeps the record of a
// verified signature beside the artifact, and sets verified to how the
// policy was met.
func modelSigCheck(pol *trust.Policy, d *store.Domain, dir, repo string, verified *[]trust.Verified) (func(context.Context, artifact.ID, []artifact.FileEntry) error, error) {
	m, ref := pol.MatchOMS(repo)
	sig, err := trust.ReadDirSignature(m, ref, dir)
	if err != nil || !sig.Present() {
		return nil, err
	}
	return func(ctx context.Context, id artifact.ID, files []artifact.FileEntry) error {
		v, rec, err := sig.Check(files)
		if err != nil {
			return err
		}
		*verified = v
		return trust.Keep(ctx, d, id, rec)
	}, nil
}

// importChecked is resolve.Import of req.Dir, checked against its
// model.sig (modelSigCheck).
func importChecked(ctx context.Context, a *app, d *store.Domain, req resolve.ImportRequest) (*store.Lease, store.BuildResult, []trust.Verified, error) {
	pol, err := a.cfg.Verify.LoadPolicy()
	if err != nil {
		return nil, store.BuildResult{}, nil, err
	}
	var verified []trust.Verified
	if req.Check, err = modelSigCheck(pol, d, req.Dir, req.Repository, &verified); err != nil {
		return nil, store.BuildResult{}, nil, err
	}
	lease, res, err := resolve.Import(ctx, d, req)
	return lease, res, verified, err
}
