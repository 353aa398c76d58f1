// Package prefetch is the prefetch directory: its files bring the artifacts
// they declare into the store before any pod asks. Each prefetch file is a
// TOML file of the directory ([prefetch] dir) listing artifacts by registry
// reference and, optionally, identity, with pin = true|false. The package
// resolves each through the usual order (the store, the weight peers, the
// registry), pins or unpins it as its file says (the pin's holder is
// "prefetch:<file>"), retries what fails with a backoff, and unpins, never
// deletes, an artifact whose entry left. The directory is polled, so a
// Kubernetes ConfigMap mounted there, which changes in place through a
// symlink swap of its ..data directory, is followed.
package prefetch

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"github.com/weightsnap/weightsnap/artifact"
)

// maxFileBytes bounds a prefetch file.
const maxFileBytes = 1 << 20

// Entry is one declared artifact.
type Entry struct {
	// Ref is a registry reference (tag or digest) of the artifact.
	Ref string `toml:"ref" json:"ref,omitempty"`
	// Identity is the identity digest it must be ("sha256:<hex>"); alone, a
	// store artifact or one the weight peers hold.
	Identity string `toml:"identity" json:"identity,omitempty"`
	// Pin keeps it from eviction while the entry is declared.
	Pin bool `toml:"pin" json:"pin"`
}

// file is one prefetch file.
type file struct {
	Artifact []Entry `toml:"artifact"`
}

// Declared is an entry with the file that declares it.
type Declared struct {
	Entry
	File string      `json:"file"` // the file's name in the directory
	ID   artifact.ID `json:"-"`    // Identity, parsed (zero when absent)
}

// Holder is the pin holder of the entries of a file.
func Holder(fileName string) string { return "prefetch:" + fileName }

// key names an entry across reads.
func (d Declared) key() string { return d.File + "\x00" + d.Ref + "\x00" + d.Identity }

// readDir reads every *.toml file of dir (following links; the names a
// ConfigMap's swap uses, starting with "..", are skipped). A missing
// directory declares nothing. A bad file is reported and declares nothing,
// and the others are read.
func readDir(dir string) ([]Declared, map[string]error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, map[string]error{dir: err}
	}
	var out []Declared
	bad := map[string]error{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".toml") {
			continue
		}
		ds, err := readFile(filepath.Join(dir, name), name)
		if err != nil {
			bad[name] = err
			continue
		}
		out = append(out, ds...)
	}
	return out, bad
}

func readFile(path, name string) ([]Declared, error) {
	raw, err := artifact.ReadFileAtMost(path, maxFileBytes)
	if errors.Is(err, artifact.ErrFileTooLarge) {
		return nil, fmt.Errorf("prefetch file %s is larger than %d bytes: %w", name, maxFileBytes, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	var pf file
	dec := toml.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return nil, fmt.Errorf("prefetch file %s: %v: %w", name, err, errdefs.ErrInvalidArgument)
	}
	var out []Declared
	for i, e := range pf.Artifact {
		d := Declared{Entry: e, File: name}
		if e.Ref == "" && e.Identity == "" {
			return nil, fmt.Errorf("prefetch file %s: artifact %d names neither ref nor identity: %w", name, i+1, errdefs.ErrInvalidArgument)
		}
		if e.Identity != "" {
			id, err := artifact.ParseID(e.Identity)
			if err != nil {
				return nil, fmt.Errorf("prefetch file %s: artifact %d: %w", name, i+1, err)
			}
			d.ID = id
		}
		if !slices.ContainsFunc(out, func(o Declared) bool { return o.key() == d.key() }) {
			out = append(out, d)
		}
	}
	return out, nil
}
