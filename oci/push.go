package oci

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sync/errgroup"
)

// PushOptions tune a push: its uploads, the repositories it mounts from, and its signature.
type PushOptions struct {
	// Concurrency is the number of blobs uploaded at once; 0 means DefaultConcurrency.
	Concurrency int
	// MountFrom lists other repositories of the same registry to mount missing blobs from. A push
	// tries them before it uploads a blob.
	MountFrom []string
	// Progress, if set, is told of payload bytes uploaded, mounted or found already present. It is
	// called from several goroutines at once.
	Progress func(n int64)
	// SignKey, if set, signs the manifest digest (trust.SignManifest). The signature is a cosign v3
	// bundle attached as a referrer of the manifest, unless the key's signature of it is attached
	// already.
	SignKey crypto.Signer
}

// PushReport says what a push did: the blobs it uploaded, mounted or found, and its signature.
type PushReport struct {
	Ref       string      `json:"ref"`
	Reference string      `json:"reference"` // registry/repo@sha256:<manifest>
	Manifest  string      `json:"manifest"`
	ID        artifact.ID `json:"identity"`
	Blobs     int         `json:"blobs"`
	Bytes     int64       `json:"bytes"`
	Uploaded  int64       `json:"uploaded_bytes"`
	Mounted   int64       `json:"mounted_bytes"`
	Existing  int64       `json:"existing_bytes"`
	Seconds   float64     `json:"seconds"`
	// Signature is the digest of the signature referrer's manifest, when the push was signed.
	Signature string `json:"signature,omitempty"`
}

// blobSource is one blob to push and how to read it.
type blobSource struct {
	desc    ocispec.Descriptor
	what    string
	open    func() (*os.File, error) // payload files: a fresh descriptor of the leased file
	data    []byte                   // small blobs and empty files
	payload bool                     // counted in reports and progress
}

// Push uploads a leased artifact to the remote's repository in its OCI form. It tags the artifact
// when the reference has a tag. It also tags it with IdentityTag, for resolution's registry
// provider. Payload blobs stream from the lease's files, by sendfile where the platform allows.
// Blobs the registry already holds are skipped; MountFrom repositories are tried before an upload.
// The manifest goes last, so a reader never sees a manifest whose blobs are missing.
func Push(ctx context.Context, l *store.Lease, r *registry.Remote, o PushOptions) (*PushReport, error) {
	start := time.Now()
	files := l.Files()
	byPath := make(map[string]io.ReaderAt, len(files))
	for _, lf := range files {
		byPath[lf.Path] = lf.File
	}
	pieces, err := hashPieces(ctx, l.Index.Files, func(path string) io.ReaderAt { return byPath[path] })
	if err != nil {
		return nil, err
	}
	a, err := NewArtifact(l.Identity(), l.Index, pieces)
	if err != nil {
		return nil, err
	}
	var blobs []blobSource
	for i, desc := range a.Layers {
		lf := files[i]
		if lf.Path != l.Index.Files[i].Path {
			return nil, fmt.Errorf("lease files and index disagree at %s", lf.Path)
		}
		if desc.Size == 0 {
			blobs = append(blobs, blobSource{desc: desc, what: lf.Path, data: []byte{}, payload: true})
			continue
		}
		blobs = append(blobs, blobSource{desc: desc, what: lf.Path, payload: true, open: func() (*os.File, error) {
			// A new open file description of the same inode: its own offset,
			// and closing it (the HTTP transport does) leaves the lease alone.
			return os.Open(fmt.Sprintf("/proc/self/fd/%d", lf.File.Fd()))
		}})
	}
	blobs = append(blobs, blobSource{desc: a.IndexDesc, what: "index layer", data: a.Index},
		blobSource{desc: a.ConfigDesc, what: "config", data: a.Config})
	if a.Pieces != nil {
		blobs = append(blobs, blobSource{desc: a.PiecesDesc, what: "pieces layer", data: a.Pieces})
	}
	rep := &PushReport{Ref: r.String(), Manifest: a.ManifestDesc.Digest.String(), ID: a.ID,
		Reference: r.Name() + "@" + a.ManifestDesc.Digest.String(), Blobs: len(blobs), Bytes: l.Index.TotalBytes()}

	pp := newPushProgress(o.Progress)
	defer pp.stop()
	quiet := newPushProgress(nil)
	conc := o.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	var uploaded, mounted, existing atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for _, b := range blobs {
		g.Go(func() error {
			bp := pp
			if !b.payload {
				bp = quiet // progress counts payload bytes only
			}
			how, err := pushBlob(gctx, r, b, o.MountFrom, bp)
			if err != nil {
				return fmt.Errorf("push %s (%s): %w", b.what, b.desc.Digest, registry.Classify(err))
			}
			switch {
			case !b.payload: // reports count payload bytes
			case how == "exists":
				existing.Add(b.desc.Size)
			case how == "mounted":
				mounted.Add(b.desc.Size)
			default:
				uploaded.Add(b.desc.Size)
			}
			log.G(gctx).WithField("blob", b.what).WithField("how", how).Debug("blob pushed")
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := pushManifest(ctx, r, a.ManifestDesc, a.Manifest); err != nil {
		return nil, err
	}
	if err := tagIdentity(ctx, r, a); err != nil {
		return nil, err
	}
	if o.SignKey != nil {
		sd, err := signOnce(ctx, r, a.ManifestDesc, r.Name(), o.SignKey)
		if err != nil {
			return nil, err
		}
		rep.Signature = sd.Digest.String()
	}
	rep.Uploaded, rep.Mounted, rep.Existing = uploaded.Load(), mounted.Load(), existing.Load()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// pushManifest uploads a manifest, tagged when the remote's reference is a tag.
func pushManifest(ctx context.Context, r *registry.Remote, desc ocispec.Descriptor, raw []byte) error {
	var err error
	if tag := r.Ref.Reference; tag != "" && r.Ref.ValidateReferenceAsDigest() != nil {
		err = r.Repo.PushReference(ctx, desc, bytes.NewReader(raw), tag)
	} else {
		if d, derr := r.Ref.Digest(); derr == nil && d != desc.Digest {
			return manifestError(r.String(), "reference names digest "+d.String()+" but the manifest is "+desc.Digest.String())
		}
		err = r.Repo.Push(ctx, desc, bytes.NewReader(raw))
	}
	if err != nil {
		return fmt.Errorf("push manifest %s: %w", desc.Digest, registry.Classify(err))
	}
	return nil
}

var errNoMount = errors.New("mount refused; trying the next source")

// pushBlob makes one blob present in the repository: already there, mounted
// from another repository, or uploaded. It returns which.
func pushBlob(ctx context.Context, r *registry.Remote, b blobSource, mountFrom []string, pp *pushProgress) (string, error) {
	if ok, err := r.Repo.Exists(ctx, b.desc); err == nil && ok {
		pp.add(b.desc.Size)
		return "exists", nil
	}
	uploaded := false
	var tf *trackedFile
	openBody := func() (io.ReadCloser, error) {
		uploaded = true
		if b.open == nil {
			return io.NopCloser(bytes.NewReader(b.data)), nil
		}
		f, err := b.open()
		if err != nil {
			return nil, err
		}
		tf = pp.track(f, b.desc.Size)
		return f, nil // the transport needs the *os.File itself for sendfile
	}
	var candidates []string
	for _, m := range mountFrom {
		if m != "" && m != r.Ref.Repository {
			candidates = append(candidates, m)
		}
	}
	for i, from := range candidates {
		get := openBody
		if i < len(candidates)-1 {
			get = func() (io.ReadCloser, error) { return nil, errNoMount }
		}
		err := r.Repo.Mount(ctx, b.desc, from, get)
		if err == nil {
			pp.finish(tf, b.desc.Size)
			if uploaded {
				return "uploaded", nil
			}
			return "mounted", nil
		}
		if !errors.Is(err, errNoMount) {
			return "", err
		}
	}
	if len(candidates) > 0 {
		return "", fmt.Errorf("no mount source accepted the blob")
	}
	var body io.Reader = bytes.NewReader(b.data) // a known length, even when empty
	if b.open != nil {
		rc, err := openBody()
		if err != nil {
			return "", err
		}
		body = rc
	}
	if err := r.Repo.Push(ctx, b.desc, body); err != nil {
		return "", err
	}
	pp.finish(tf, b.desc.Size)
	return "uploaded", nil
}

// pushProgress reports upload progress of files the HTTP transport sends
// with sendfile, by sampling their offsets.
type pushProgress struct {
	fn    func(int64)
	mu    sync.Mutex
	files map[*trackedFile]struct{}
	done  chan struct{}
	once  sync.Once
}

type trackedFile struct {
	*os.File
	size     int64
	reported int64
}

func newPushProgress(fn func(int64)) *pushProgress {
	pp := &pushProgress{fn: fn, files: map[*trackedFile]struct{}{}, done: make(chan struct{})}
	if fn != nil {
		go pp.loop()
	}
	return pp
}

func (pp *pushProgress) add(n int64) {
	if pp.fn != nil && n > 0 {
		pp.fn(n)
	}
}

// track registers a file body whose offset the loop samples.
func (pp *pushProgress) track(f *os.File, size int64) *trackedFile {
	if pp.fn == nil {
		return nil
	}
	tf := &trackedFile{File: f, size: size}
	pp.mu.Lock()
	pp.files[tf] = struct{}{}
	pp.mu.Unlock()
	return tf
}

// finish reports the rest of a blob once it is in the registry.
func (pp *pushProgress) finish(tf *trackedFile, size int64) {
	if pp.fn == nil {
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if tf != nil {
		size -= tf.reported
		delete(pp.files, tf)
	}
	pp.fn(size)
}

func (pp *pushProgress) loop() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-pp.done:
			return
		case <-t.C:
		}
		pp.mu.Lock()
		for tf := range pp.files {
			if off, err := tf.Seek(0, io.SeekCurrent); err == nil && off > tf.reported && off <= tf.size {
				pp.fn(off - tf.reported)
				tf.reported = off
			}
		}
		pp.mu.Unlock()
	}
}

func (pp *pushProgress) stop() { pp.once.Do(func() { close(pp.done) }) }
