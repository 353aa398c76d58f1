package resolve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/trust"
)

// dirSignature is the check of a directory's model.sig, an OpenSSF
// model-signing bundle, for an import of it (weightsnap import, a staged
// hub snapshot's publication): what the policy requires of the model
// repository and the bundle, when there is one.
type dirSignature struct {
	m    trust.Match
	ref  string // the record's reference: the repository, or ""
	path string
	raw  []byte // nil: no model.sig, and the scope wants none
}

// readDirSignature reads dir's model.sig, checked under m, its record
// keeping the reference ref (a repository name or ""). Under a scope that
// requires a signature a directory without one is refused here, before a
// byte is copied. nil: dir is not a directory (the import says so).
func readDirSignature(m trust.Match, ref, dir string) (*dirSignature, error) {
	s := &dirSignature{m: m, ref: ref, path: filepath.Join(dir, trust.OMSSignatureFile)}
	raw, err := artifact.ReadFileAtMost(s.path, trust.MaxBundleBytes)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		if s.m.Requires() {
			return nil, &trust.Refusal{Scope: s.m.Scope, Reason: fmt.Sprintf("no %s beside the files of %s: sigstoreSigned is required", trust.OMSSignatureFile, dir)}
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	s.raw = raw
	return s, nil
}

// check compares the bundle with the digests the store computed while it
// copied the files (their sha256, or blake3 where the bundle says so),
// save its ignore_paths, and, under a scope that requires a signature,
// verifies it by a key or identity the scope trusts; it returns how the
// policy was met and the record to keep (unsigned when the scope wants
// no signature: nothing is kept).
func (s *dirSignature) check(files []artifact.FileEntry) ([]trust.Verified, trust.Record, error) {
	if s.raw == nil {
		return nil, trust.Record{}, nil
	}
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: files}
	sig := trust.Signature{Source: s.path, Raw: s.raw}
	if s.m.Requires() {
		v, err := trust.VerifyOMS(s.m, sig, idx, time.Now().UTC())
		if err != nil {
			return nil, trust.Record{}, err
		}
		return v, trust.NewOMSRecord(s.ref, s.m.Scope, sig, v), nil
	}
	o, err := trust.ParseOMS(s.raw)
	if err == nil {
		err = o.CheckFiles(idx)
	}
	if err != nil {
		return nil, trust.Record{}, fmt.Errorf("%s: %w", s.path, err)
	}
	return []trust.Verified{{Scope: s.m.Scope, Type: trust.TypeAcceptAnything, Time: time.Now().UTC()}}, trust.Record{}, nil
}

// hasDirSignature says whether dir holds a model.sig.
func hasDirSignature(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, trust.OMSSignatureFile))
	return err == nil
}

// sourceSigned checks the model.sig beside a local passthrough build's
// source against the source's digests (each sha256, which the copy
// verifies), under what the policy requires of the request, and keeps its
// record, before the producer runs: nil, or the failure that ends the
// build (a refusal is a policy failure).
func (a *attempt) sourceSigned(st SourceSignatures, step, source string, src *artifact.SourceDir) *Failure {
	fail := func(err error) *Failure {
		if isPolicyRefusal(err) {
			return &Failure{Kind: KindPolicy, Step: step, Source: source, Err: err}
		}
		return &Failure{Kind: KindProducer, Step: step, Source: source, Err: err}
	}
	m, ref, err := st.SourceSignature(a.req.Artifact)
	if err != nil {
		return fail(err)
	}
	sig, err := readDirSignature(m, ref, src.Root)
	if err != nil || sig == nil {
		return fail(err)
	}
	files := make([]artifact.FileEntry, len(src.Files))
	for i, f := range src.Files {
		files[i] = artifact.FileEntry{File: artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}}
	}
	_, rec, err := sig.check(files)
	if err == nil {
		err = trust.Keep(a.ctx, a.dom, a.rep.ID, rec)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}
