package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/trust"
)

// Scratch is the --base value of a weight image with no base layers.
const Scratch = "scratch"

// WeightMount is one artifact a weight image mounts.
type WeightMount struct {
	Ref    string // the artifact's reference
	Target string // absolute directory in the container: with ImageOptions.Layout hf, the cache root
	// Repo is the Hugging Face repo id under ImageOptions.Layout hf. "" takes the artifact's model
	// repository.
	Repo string
}

// ImageOptions describe the weight image BuildImage writes.
type ImageOptions struct {
	Base     string // base image reference, or Scratch
	Weights  []WeightMount
	Platform string // picked from a base image index, and the scratch config's platform; "" means HostPlatform
	// Mode is every pointer's pointer.LabelMode: pointer.ModeRequired or pointer.ModePreferred. ""
	// leaves it to the node.
	Mode string
	// Layout is every pointer's pointer.LabelLayout. "" puts the artifact's own files at its
	// target. pointer.LayoutHF puts a Hugging Face cache rooted at the target. Several artifacts
	// may share one cache root, each under its repo.
	Layout string
	// Policy, if set, is checked against each artifact's manifest as a pull checks it. A refusal
	// ends the build before anything is pushed.
	Policy *trust.Policy
}

// ImageReport says what BuildImage wrote.
type ImageReport struct {
	Ref          string            `json:"ref"`
	Reference    string            `json:"reference"`
	Manifest     string            `json:"manifest"`
	Config       string            `json:"config"`
	Base         string            `json:"base"`
	BaseManifest string            `json:"base_manifest,omitempty"`
	BaseLayers   int               `json:"base_layers"`
	MountedBlobs int               `json:"mounted_blobs"`
	Pointers     []pointer.Pointer `json:"pointers"`
	PointerLayer []string          `json:"pointer_layers"`
	Seconds      float64           `json:"seconds"`
	// Verified says how each artifact met the trust policy, in --weights order. It is absent
	// without ImageOptions.Policy.
	Verified [][]trust.Verified `json:"verified,omitempty"`
}

// fetchWeightsnapPlan fetches the manifest and index layer of an artifact
// weightsnap pushed (other artifacts are refused), the manifest checked
// against the policy (nil: none) first; it returns the plan, the manifest
// digest and how the policy was met.
func fetchWeightsnapPlan(ctx context.Context, r *registry.Remote, p *trust.Policy) (*Plan, string, []trust.Verified, error) {
	res, err := resolveManifest(ctx, r, "")
	if err != nil {
		return nil, "", nil, err
	}
	rec, err := verifyResolved(ctx, p, r, res)
	if err != nil {
		return nil, "", nil, err
	}
	var v []trust.Verified
	if rec != nil {
		v = rec.Verified
	}
	if _, ok := IndexLayer(res.Manifest); !ok {
		return nil, "", nil, manifestError(r.String(), "not a weightsnap artifact (no "+MediaTypeIndex+" layer): import it with `weightsnap pull --revision` and push it with `weightsnap push`")
	}
	plan, err := planRemote(ctx, r, res.Manifest, ImportOptions{})
	return plan, res.Desc.Digest.String(), v, err
}

// BuildImage writes a weight image to target: the base image's layers plus one pointer layer per
// artifact. Its image config's rootfs.diff_ids include the pointers. No base or weight blob passes
// through the client. A base layer already in the target repository is reused. A base layer in
// another repository of the same registry is mounted. Only the pointer layers, the config and the
// manifest are uploaded.
func BuildImage(ctx context.Context, target *registry.Remote, o ImageOptions) (*ImageReport, error) {
	start := time.Now()
	if len(o.Weights) == 0 {
		return nil, manifestError(target.String(), "a weight image needs at least one --weights")
	}
	rep := &ImageReport{Ref: target.String(), Base: o.Base}
	if o.Mode != "" && o.Mode != pointer.ModeRequired && o.Mode != pointer.ModePreferred {
		return nil, manifestError(target.String(), fmt.Sprintf("mode %q: want %s or %s", o.Mode, pointer.ModeRequired, pointer.ModePreferred))
	}
	var ptrs []pointer.Pointer
	var pls []*PointerLayer
	seen := map[string]bool{}    // view directories
	roots := map[string]string{} // targets, and their layout
	for _, w := range o.Weights {
		t, err := pointer.CleanTarget(w.Target)
		if err != nil {
			return nil, invalidManifest(w.Ref, err)
		}
		if layout, ok := roots[t]; ok && (layout != o.Layout || o.Layout == "") {
			return nil, manifestError(w.Ref, "two artifacts at "+t)
		}
		roots[t] = o.Layout
		wr, err := target.Sibling(w.Ref)
		if err != nil {
			return nil, err
		}
		plan, mdigest, verified, err := fetchWeightsnapPlan(ctx, wr, o.Policy)
		if err != nil {
			return nil, err
		}
		if o.Policy != nil {
			rep.Verified = append(rep.Verified, verified)
		}
		id, err := plan.Identity.ID()
		if err != nil {
			return nil, err
		}
		p := pointer.Pointer{Artifact: wr.Name() + "@" + mdigest, ID: id, Target: t,
			Files: len(plan.Files), Bytes: plan.TotalBytes(), Mode: o.Mode, Layout: o.Layout, Repo: w.Repo}
		if p.Layout != "" && p.Repo == "" {
			if p.Repo = plan.Identity.Model.Repository; p.Repo == "" {
				return nil, manifestError(w.Ref, "the artifact names no model repository: give its Hugging Face repo id (--repo ORG/NAME)")
			}
		}
		if err := pointer.CheckLayout(p.Layout, p.Repo); err != nil {
			return nil, invalidManifest(w.Ref, err)
		}
		v := pointer.ViewDir(p)
		if seen[v] {
			return nil, manifestError(w.Ref, "two artifacts at "+v)
		}
		seen[v] = true
		ptrs = append(ptrs, p)
	}
	for i, p := range ptrs {
		for _, n := range ptrs[i+1:] {
			p.Next = append(p.Next, pointer.Pointer{Artifact: n.Artifact, ID: n.ID})
		}
		pl, err := NewPointerLayer(p)
		if err != nil {
			return nil, err
		}
		pls = append(pls, pl)
		rep.Pointers = append(rep.Pointers, pl.Pointer)
		rep.PointerLayer = append(rep.PointerLayer, pl.Desc.Digest.String())
	}

	var base *baseImage
	var err error
	if o.Base == Scratch || o.Base == "" {
		rep.Base = Scratch
		base, err = scratchBase(o.Platform)
	} else {
		base, err = fetchBase(ctx, target, o.Base, o.Platform)
	}
	if err != nil {
		return nil, err
	}
	rep.BaseManifest, rep.BaseLayers = base.manifest, len(base.layers)
	img, err := ComposeImage(base.config, base.layers, pls, base.annotations)
	if err != nil {
		return nil, err
	}

	// Base layers: present in the target repository, or mounted there.
	for _, l := range base.layers {
		mounted, err := ensureBlob(ctx, target, l, base.remote)
		if err != nil {
			return nil, err
		}
		if mounted {
			rep.MountedBlobs++
		}
	}
	small := []blobSource{{desc: img.ConfigDesc, what: "image config", data: img.Config}}
	for _, pl := range pls {
		small = append(small, blobSource{desc: pl.Desc, what: "pointer layer " + pl.Pointer.Target, data: pl.Tar})
	}
	quiet := newPushProgress(nil)
	for _, b := range small {
		if _, err := pushBlob(ctx, target, b, nil, quiet); err != nil {
			return nil, fmt.Errorf("push %s: %w", b.what, registry.Classify(err))
		}
	}
	if err := pushManifest(ctx, target, img.ManifestDesc, img.Manifest); err != nil {
		return nil, err
	}
	rep.Manifest, rep.Config = img.ManifestDesc.Digest.String(), img.ConfigDesc.Digest.String()
	rep.Reference = target.Name() + "@" + rep.Manifest
	rep.Seconds = time.Since(start).Seconds()
	log.G(ctx).WithField("image", rep.Reference).WithField("pointers", len(pls)).Debug("weight image written")
	return rep, nil
}

// baseImage is what a weight image takes from its base.
type baseImage struct {
	remote      *registry.Remote // nil for scratch
	manifest    string
	config      []byte
	layers      []ocispec.Descriptor
	annotations map[string]string
}

func scratchBase(platform string) (*baseImage, error) {
	if platform == "" {
		platform = HostPlatform()
	}
	os, arch, ok := strings.Cut(platform, "/")
	if !ok {
		return nil, fmt.Errorf("platform %q is not os/arch", platform)
	}
	variant := ""
	arch, variant, _ = strings.Cut(arch, "/")
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: os, Architecture: arch, Variant: variant},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return &baseImage{config: raw}, nil
}

func fetchBase(ctx context.Context, target *registry.Remote, ref, platform string) (*baseImage, error) {
	br, err := target.Sibling(ref)
	if err != nil {
		return nil, err
	}
	res, err := resolveManifest(ctx, br, platform)
	if err != nil {
		return nil, err
	}
	cfg, err := br.FetchSmall(ctx, res.Manifest.Config, "config of "+ref, 64<<20)
	if err != nil {
		return nil, err
	}
	b := &baseImage{remote: br, manifest: res.Desc.Digest.String(), config: cfg,
		annotations: map[string]string{
			ocispec.AnnotationBaseImageName:   br.Name() + ":" + br.Ref.ReferenceOrDefault(),
			ocispec.AnnotationBaseImageDigest: res.Desc.Digest.String(),
		}}
	if br.Ref.ValidateReferenceAsDigest() == nil {
		b.annotations[ocispec.AnnotationBaseImageName] = br.Name()
	}
	for _, l := range res.Manifest.Layers {
		l.MediaType = ociMediaType(l.MediaType)
		b.layers = append(b.layers, l)
	}
	return b, nil
}

// Image is a composed weight image: config and manifest bytes.
type Image struct {
	Config       []byte
	ConfigDesc   ocispec.Descriptor
	Manifest     []byte
	ManifestDesc ocispec.Descriptor
}

// ComposeImage makes a weight image from a base config, base layers and pointer layers. Scratch has
// no base layers. The base config is copied, with the pointers' diff ids appended to
// rootfs.diff_ids. Where the base keeps history, each pointer adds one history entry. The result is
// deterministic.
func ComposeImage(baseConfig []byte, baseLayers []ocispec.Descriptor, pls []*PointerLayer, annotations map[string]string) (*Image, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(baseConfig, &doc); err != nil {
		return nil, fmt.Errorf("base image config: %w", err)
	}
	var rootfs struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	if raw, ok := doc["rootfs"]; ok {
		if err := json.Unmarshal(raw, &rootfs); err != nil {
			return nil, fmt.Errorf("base image config rootfs: %w", err)
		}
	}
	if rootfs.Type == "" {
		rootfs.Type = "layers"
	}
	if len(rootfs.DiffIDs) != len(baseLayers) {
		return nil, fmt.Errorf("base image config has %d diff ids for %d layers", len(rootfs.DiffIDs), len(baseLayers))
	}
	var history []json.RawMessage
	if raw, ok := doc["history"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &history); err != nil {
			return nil, fmt.Errorf("base image config history: %w", err)
		}
	}
	keepHistory := len(history) > 0 || len(baseLayers) == 0
	layers := append([]ocispec.Descriptor(nil), baseLayers...)
	for _, pl := range pls {
		rootfs.DiffIDs = append(rootfs.DiffIDs, pl.DiffID)
		layers = append(layers, pl.Desc)
		if keepHistory {
			h, err := json.Marshal(ocispec.History{
				CreatedBy: createdBy(pl.Pointer),
				Comment:   "weightsnap pointer layer: " + pl.Pointer.ID.String(),
			})
			if err != nil {
				return nil, err
			}
			history = append(history, h)
		}
	}
	var err error
	if doc["rootfs"], err = json.Marshal(rootfs); err != nil {
		return nil, err
	}
	if keepHistory {
		if doc["history"], err = json.Marshal(history); err != nil {
			return nil, err
		}
	}
	img := &Image{}
	if img.Config, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	img.ConfigDesc = descriptorOf(ocispec.MediaTypeImageConfig, img.Config)
	m := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      img.ConfigDesc,
		Layers:      layers,
		Annotations: annotations,
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	if img.Manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	img.ManifestDesc = descriptorOf(ocispec.MediaTypeImageManifest, img.Manifest)
	return img, nil
}

// createdBy is a pointer layer's history entry: the build flags that make it.
func createdBy(p pointer.Pointer) string {
	s := "weightsnap image build --weights " + p.Artifact + " --at " + p.Target
	if p.Layout != "" {
		s += " --layout " + p.Layout + " --repo " + p.Repo
	}
	return s
}

var errNoCopy = errors.New("weightsnap copies no base blob through the client")

// ensureBlob makes a base layer present in the target repository without
// copying it through the client: it is there already, or the registry
// mounts it from the base's repository. It reports whether it mounted.
func ensureBlob(ctx context.Context, target *registry.Remote, desc ocispec.Descriptor, from *registry.Remote) (bool, error) {
	ok, err := target.Repo.Exists(ctx, desc)
	if err != nil {
		return false, fmt.Errorf("check base layer %s: %w", desc.Digest, registry.Classify(err))
	}
	if ok {
		return false, nil
	}
	if from == nil || from.Ref.Registry != target.Ref.Registry {
		return false, unsupported(target.String(), fmt.Sprintf("base layer %s is not in %s and the base is in another registry; push the base to %s first", desc.Digest, target.Name(), target.Ref.Registry))
	}
	err = target.Repo.Mount(ctx, desc, from.Ref.Repository, func() (io.ReadCloser, error) { return nil, errNoCopy })
	if errors.Is(err, errNoCopy) {
		return false, unsupported(target.String(), fmt.Sprintf("registry refused to mount base layer %s from %s, and %v", desc.Digest, from.Name(), errNoCopy))
	}
	if err != nil {
		return false, fmt.Errorf("mount base layer %s from %s: %w", desc.Digest, from.Name(), registry.Classify(err))
	}
	return true, nil
}
