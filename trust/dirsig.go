package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
)

// DirSignature is the check of a directory's model.sig, an OpenSSF
// model-signing bundle, for an import of it (weightsnap import, a staged
// hub snapshot's publication, a local passthrough build): what the policy
// requires of it and the bundle, when there is one.
type DirSignature struct {
	m    Match
	ref  string // the record's reference: the repository, or ""
	path string
	raw  []byte // nil: no model.sig, and the scope wants none
}

// ReadDirSignature reads dir's model.sig, checked under m, its record
// keeping the reference ref (a repository name or ""). Under a scope that
// requires a signature a directory without one is refused here, before a
// byte is copied. nil: dir is not a directory (the import says so).
func ReadDirSignature(m Match, ref, dir string) (*DirSignature, error) {
	s := &DirSignature{m: m, ref: ref, path: filepath.Join(dir, OMSBundleFile)}
	raw, err := artifact.ReadFileAtMost(s.path, MaxBundleBytes)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		if s.m.Requires() {
			return nil, &Refusal{Scope: s.m.Scope, Reason: fmt.Sprintf("no %s beside the files of %s: sigstoreSigned is required", OMSBundleFile, dir)}
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	s.raw = raw
	return s, nil
}

// Present says whether the directory holds a model.sig.
func (s *DirSignature) Present() bool { return s != nil && s.raw != nil }

// Check compares the bundle with the digests the store computed while it
// copied the files (their sha256, or blake3 where the bundle says so),
// save its ignore_paths, and, under a scope that requires a signature,
// verifies it by a key or identity the scope trusts; it returns how the
// policy was met and the record to keep (unsigned when the scope wants
// no signature: nothing is kept).
func (s *DirSignature) Check(files []artifact.FileEntry) ([]Verified, Record, error) {
	if !s.Present() {
		return nil, Record{}, nil
	}
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: files}
	sig := Signature{Source: s.path, Raw: s.raw}
	if s.m.Requires() {
		v, err := VerifyOMS(s.m, sig, idx, time.Now().UTC())
		if err != nil {
			return nil, Record{}, err
		}
		return v, NewOMSRecord(s.ref, s.m.Scope, sig, v), nil
	}
	o, err := ParseOMS(s.raw)
	if err == nil {
		err = o.CheckFiles(idx)
	}
	if err != nil {
		return nil, Record{}, fmt.Errorf("%s: %w", s.path, err)
	}
	return []Verified{{Scope: s.m.Scope, Type: TypeAcceptAnything, Time: time.Now().UTC()}}, Record{}, nil
}
