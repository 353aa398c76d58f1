package pointer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"oras.land/oras-go/v2/registry"
)

// labelPrefix starts every weightsnap label of a pointer layer.
const labelPrefix = "containerd.io/snapshot/weightsnap."

// labelError is a pointer layer's label (key) that is not acceptable,
// invalid input: labels come from an image, so they are untrusted. The
// value is cut to a readable length.
func labelError(key, value, format string, args ...any) error {
	if len(value) > 96 {
		value = value[:96] + "..."
	}
	label := key
	if value != "" {
		label = fmt.Sprintf("%s=%q", key, value)
	}
	return fmt.Errorf("weight layer label %s: %s: %w", label, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// IsWeightLayer says whether labels (or a layer's annotations) name a
// weight artifact: any weightsnap label makes a layer a weight layer, whose
// labels must then parse.
func IsWeightLayer(labels map[string]string) bool {
	for k := range labels {
		if strings.HasPrefix(k, labelPrefix) {
			return true
		}
	}
	return false
}

// Labels are the labels (layer annotations) that carry p.
func Labels(p Pointer) map[string]string {
	labels := map[string]string{LabelArtifact: p.Artifact, LabelIdentity: p.ID.String(), LabelTarget: p.Target}
	if p.Mode != "" {
		labels[LabelMode] = p.Mode
	}
	if p.Layout != "" {
		labels[LabelLayout] = p.Layout
	}
	if p.Repo != "" {
		labels[LabelRepo] = p.Repo
	}
	if len(p.Next) > 0 {
		next := make([]string, len(p.Next))
		for i, n := range p.Next {
			next[i] = n.ID.String() + "=" + n.Artifact
		}
		labels[LabelNext] = strings.Join(next, ",")
	}
	return labels
}

// LabelBytes is the size containerd counts for labels: keys and values.
func LabelBytes(labels map[string]string) int {
	total := 0
	for k, v := range labels {
		total += len(k) + len(v)
	}
	return total
}

// ParseLabels reads the pointer that a pointer layer's labels carry
// (the layer's annotations, as containerd passes them to a snapshotter's
// Prepare). ok is false for an ordinary layer, one with no weightsnap label.
// A weight layer's labels are accepted only when the artifact reference is
// a registry reference pinned by a sha256 digest, the identity is
// sha256:<64 lower-case hex>, the target is an absolute clean directory
// (CleanTarget leaves it as it is), every LabelNext entry is such an
// identity and reference, LabelMode is absent, ModeRequired or
// ModePreferred, LabelLayout and LabelRepo are both absent or LayoutHF and
// a repo id (CheckLayout), and the weightsnap labels together fit in
// containerd's limit for one label; anything else is errdefs.ErrInvalidArgument
// naming the label.
// Labels of other keys are ignored.
func ParseLabels(labels map[string]string) (p Pointer, ok bool, err error) {
	if !IsWeightLayer(labels) {
		return Pointer{}, false, nil
	}
	ours := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, labelPrefix) {
			ours[k] = v
		}
	}
	if total := LabelBytes(ours); total > MaxLabelsBytes {
		return Pointer{}, true, labelError(labelPrefix+"*", "", "the weightsnap labels take %d bytes, more than containerd's %d-byte limit", total, MaxLabelsBytes)
	}
	for _, k := range []string{LabelArtifact, LabelIdentity, LabelTarget} {
		if labels[k] == "" {
			return Pointer{}, true, labelError(k, "", "missing: a weight layer needs %s, %s and %s", LabelArtifact, LabelIdentity, LabelTarget)
		}
	}
	art, id, target := labels[LabelArtifact], labels[LabelIdentity], labels[LabelTarget]
	if err := CheckPinnedRef(art); err != nil {
		return Pointer{}, true, labelError(LabelArtifact, art, "%v", err)
	}
	pid, err := artifact.ParseID(id)
	if err != nil {
		return Pointer{}, true, labelError(LabelIdentity, id, "not sha256:<64 lower-case hex>")
	}
	if c, err := CleanTarget(target); err != nil {
		return Pointer{}, true, labelError(LabelTarget, target, "%v", err)
	} else if c != target {
		return Pointer{}, true, labelError(LabelTarget, target, "not clean (want %q)", c)
	}
	p = Pointer{Schema: Schema, Artifact: art, ID: pid, Target: target}
	if m, ok := labels[LabelMode]; ok {
		if m != ModeRequired && m != ModePreferred {
			return Pointer{}, true, labelError(LabelMode, m, "want %s or %s", ModeRequired, ModePreferred)
		}
		p.Mode = m
	}
	layout, hasLayout := labels[LabelLayout]
	repo, hasRepo := labels[LabelRepo]
	switch {
	case hasLayout && layout != LayoutHF:
		return Pointer{}, true, labelError(LabelLayout, layout, "want %s, or no label for the artifact's own files", LayoutHF)
	case hasRepo && !hasLayout:
		return Pointer{}, true, labelError(LabelRepo, repo, "a repo id without %s=%s", LabelLayout, LayoutHF)
	case hasLayout && !hasRepo:
		return Pointer{}, true, labelError(LabelRepo, "", "missing: layout %s needs the repo id", LayoutHF)
	case hasLayout:
		var re *hfcache.RepoError
		if err := hfcache.ValidateRepo(repo); errors.As(err, &re) {
			return Pointer{}, true, labelError(LabelRepo, repo, "not a hugging face repo id: %s", re.Why)
		} else if err != nil {
			return Pointer{}, true, labelError(LabelRepo, repo, "%v", err)
		}
		p.Layout, p.Repo = layout, repo
	}
	if next := labels[LabelNext]; next != "" {
		for _, e := range strings.Split(next, ",") {
			nid, nart, ok := strings.Cut(e, "=")
			id, err := artifact.ParseID(nid)
			if !ok || err != nil {
				return Pointer{}, true, labelError(LabelNext, next, "entry %q is not sha256:<hex>=<artifact>", e)
			}
			if err := CheckPinnedRef(nart); err != nil {
				return Pointer{}, true, labelError(LabelNext, next, "entry %q: %v", e, err)
			}
			p.Next = append(p.Next, Pointer{Schema: Schema, Artifact: nart, ID: id})
		}
	}
	return p, true, nil
}

// CheckPinnedRef accepts only host/repository@sha256:<64 hex>, written as
// the registry package writes it.
func CheckPinnedRef(ref string) error {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("not a registry reference: %v", err)
	}
	d, err := r.Digest()
	if err != nil {
		return fmt.Errorf("not pinned by a digest (a tag can move)")
	}
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("digest %s is not sha256", d)
	}
	if r.String() != ref {
		return fmt.Errorf("not in canonical form %q", r.String())
	}
	return nil
}

// maxPointerFileBytes bounds a pointer file: its fields fit in one
// snapshot's labels.
const maxPointerFileBytes = MaxLabelsBytes

// ParseFile reads a pointer file (untrusted: it comes from an
// image's layer): canonical JSON of a Pointer whose fields pass
// ParseLabels as labels would, at most 4096 bytes, nothing unknown.
func ParseFile(raw []byte) (Pointer, error) {
	if len(raw) > maxPointerFileBytes {
		return Pointer{}, labelError(Dir, "", "pointer file of %d bytes, more than %d", len(raw), maxPointerFileBytes)
	}
	var p Pointer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return Pointer{}, labelError(Dir, "", "pointer file is not one JSON pointer: %v", err)
	}
	if p.Schema != Schema {
		return Pointer{}, labelError(Dir, "", "pointer file schema %d, want %d", p.Schema, Schema)
	}
	q, _, err := ParseLabels(Labels(p))
	if err != nil {
		return Pointer{}, err
	}
	q.Files, q.Bytes = p.Files, p.Bytes
	return q, nil
}
