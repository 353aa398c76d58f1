// Package pointer is a weight image's pointer to an artifact as untrusted
// input: the labels of a pointer layer, the pointer file, the modes and the
// rules that accept them.
package pointer

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"oras.land/oras-go/v2/registry"
)

// Dir is the directory, relative to a weight image's target directory, that
// holds its pointer files: the pointer layer of an artifact mounted at
// /models/x holds /models/x/.weightsnap/pointers/<identity-hex>.json.
const Dir = ".weightsnap/pointers"

// Schema is the version of the pointer file encoding.
const Schema = 1

// Labels of a weight image's pointer layer: containerd passes every layer
// annotation under containerd.io/snapshot/ to the snapshotter's Prepare.
const (
	// LabelArtifact is the artifact's manifest, <registry>/<repo>@sha256:<hex>.
	LabelArtifact = "containerd.io/snapshot/weightsnap.artifact"
	// LabelIdentity is the artifact's identity digest, sha256:<hex>.
	LabelIdentity = "containerd.io/snapshot/weightsnap.identity"
	// LabelTarget is the absolute directory the artifact is mounted at.
	LabelTarget = "containerd.io/snapshot/weightsnap.target"
	// LabelNext lists the image's later pointers, "<identity>=<artifact>"
	// joined by ",", for resolving them ahead (Pointer.Next).
	LabelNext = "containerd.io/snapshot/weightsnap.next"
	// LabelMode is what a node does when the artifact cannot be had:
	// ModeRequired (the pull fails) or ModePreferred (the pointer layer
	// unpacks as it is and the weights come later); absent, the node's
	// configured mode decides (Pointer.Mode).
	LabelMode = "containerd.io/snapshot/weightsnap.mode"
	// LabelLayout is how the artifact's files are laid out at the target:
	// absent, as the artifact has them; LayoutHF, as a Hugging Face hub
	// cache root holding the repository folder of LabelRepo
	// (Pointer.Layout).
	LabelLayout = "containerd.io/snapshot/weightsnap.layout"
	// LabelRepo is the Hugging Face repo id (ORG/NAME) of LayoutHF, and
	// only of it.
	LabelRepo = "containerd.io/snapshot/weightsnap.repo"
	// MaxLabelsBytes is containerd's limit on the labels of one snapshot.
	MaxLabelsBytes = 4096
)

// Values of LabelMode.
const (
	ModeRequired  = "required"
	ModePreferred = "preferred"
)

// LayoutHF is the value of LabelLayout that lays an artifact out as a
// Hugging Face hub cache (layout/hfcache): the target is the cache root
// (HF_HUB_CACHE), holding models--ORG--NAME/ with the pointer file and the
// notice inside it, so the root holds nothing but repository folders.
const LayoutHF = "hf"

// Pointer is the content of a pointer file, and what a pointer layer's
// annotations carry: which artifact belongs at which directory.
type Pointer struct {
	Schema   int         `json:"schema"`
	Artifact string      `json:"artifact"` // registry/repo@sha256:<manifest>
	ID       artifact.ID `json:"identity"`
	Target   string      `json:"target"` // absolute directory in the container
	Files    int         `json:"files"`
	Bytes    int64       `json:"bytes"`
	// Next are the pointers (artifact and identity) of the image's later
	// pointer layers, carried in the LabelNext label so that a snapshotter
	// resolves them while containerd still prepares this layer (containerd
	// prepares an image's layers one after the other). Not in the file.
	Next []Pointer `json:"-"`
	// Mode is the image's choice when the artifact cannot be had
	// (ModeRequired, ModePreferred), carried in the LabelMode label; ""
	// leaves it to the node. It is in the file too, so images that differ
	// only in it have different layers, and never share a snapshot.
	Mode string `json:"mode,omitempty"`
	// Layout is LabelLayout: "" for the artifact's own files at Target,
	// LayoutHF for a hub cache at Target, of the repo id Repo (LabelRepo).
	// Both are in the file too.
	Layout string `json:"layout,omitempty"`
	Repo   string `json:"repo,omitempty"`
}

// CheckLayout accepts a layout and repo id as a pointer carries them: no
// layout and no repo, or LayoutHF and a repo id hfcache.ValidateRepo
// accepts; anything else is errdefs.ErrInvalidArgument.
func CheckLayout(layout, repo string) error {
	switch layout {
	case "":
		if repo != "" {
			return fmt.Errorf("repo id %q without layout %s: %w", repo, LayoutHF, errdefs.ErrInvalidArgument)
		}
		return nil
	case LayoutHF:
		return hfcache.ValidateRepo(repo)
	}
	return fmt.Errorf("layout %q: want %s or none: %w", layout, LayoutHF, errdefs.ErrInvalidArgument)
}

// ViewDir is the directory, inside the image, that holds what the pointer
// layer holds besides its parents (the pointer file and the notice) and,
// once mounted, the artifact: the target, or, for LayoutHF, the repository
// folder in it (the target is the cache root).
func ViewDir(p Pointer) string {
	if p.Layout == LayoutHF {
		return path.Join(p.Target, hfcache.Folder(p.Repo))
	}
	return p.Target
}

// CleanTarget validates a target directory: absolute, clean, not "/", and
// free of "." and ".." components.
func CleanTarget(target string) (string, error) {
	if !strings.HasPrefix(target, "/") {
		return "", fmt.Errorf("target %q is not absolute", target)
	}
	for _, part := range strings.Split(target, "/") {
		if part == "." || part == ".." {
			return "", fmt.Errorf("target %q has a %q component", target, part)
		}
	}
	c := path.Clean(target)
	if c == "/" {
		return "", fmt.Errorf("target %q is the root directory", target)
	}
	if err := artifact.ValidateRelPath(strings.TrimPrefix(c, "/")); err != nil {
		return "", fmt.Errorf("target %q: %w", target, err)
	}
	return c, nil
}

// Path is the path, inside the image, of the pointer file of p: in its
// ViewDir.
func Path(p Pointer) string {
	return path.Join(ViewDir(p), Dir, p.ID.Hex()+".json")
}

// File is the content of p's pointer file: canonical JSON and a newline.
func File(p Pointer) ([]byte, error) {
	if p.Schema == 0 {
		p.Schema = Schema
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	body, err := artifact.Canonicalize(raw)
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

// Host is the registry host of a parsed pointer's artifact.
func Host(p Pointer) string {
	r, err := registry.ParseReference(p.Artifact)
	if err != nil {
		return ""
	}
	return r.Registry
}
