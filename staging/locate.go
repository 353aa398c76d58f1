package staging

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
)

// Location says where a repository's snapshot, or a lane, is read from
// on this node: the staged copy when it is staged and verified, else the
// source.
type Location struct {
	Lane     string `json:"lane"`
	Repo     string `json:"repo,omitempty"`
	Revision string `json:"revision,omitempty"`
	Path     string `json:"path"`
	Staged   bool   `json:"staged"`
	Reason   string `json:"reason,omitempty"` // why the source, when it is
}

// Locate resolves ref: a hub repository ("org/name", "org/name@REV" with
// a commit or a ref name, main by default) mirrored by a lane on this node,
// or a lane id. A staged, verified answer counts as a use of the lane (LRU
// eviction). Lanes of r, when given, answer with their source even when
// never staged. Anything else is errdefs.ErrNotFound.
func (e *Engine) Locate(ctx context.Context, ref string, r *Recipe) (*Location, error) {
	ledgers, err := e.ledgers(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*Ledger{}
	for _, l := range ledgers {
		byID[l.ID] = l
	}
	if r != nil {
		for _, b := range r.Blocks {
			if l, ok := byID[b.ID]; !ok || l.Src != b.Src || l.Dst != b.Dst {
				l := &Ledger{ID: b.ID, Kind: b.Kind, Src: b.Src, Dst: b.Dst} // never staged here
				byID[b.ID] = l
				ledgers = append(ledgers, l)
			}
		}
	}
	if l, ok := byID[ref]; ok {
		res := &Location{Lane: l.ID, Path: l.Src}
		if why := laneUnverified(l, ""); why != "" {
			res.Reason = why
			return res, nil
		}
		res.Path, res.Staged = l.Dst, true
		e.touch(ctx, l.ID)
		return res, nil
	}
	repo, rev, _ := strings.Cut(ref, "@")
	if !repoRE.MatchString(repo) {
		return nil, fmt.Errorf("stage locate %q: not a lane id or a hub repository (org/name[@revision]): %w", ref, errdefs.ErrInvalidArgument)
	}
	if rev == "" {
		rev = "main"
	}
	folder := repoFolder(repo)
	var fallback *Location
	for _, l := range ledgers {
		if l.Kind != KindHubMirror {
			continue
		}
		srcSnap, srcErr := snapshotDir(l.Src, folder, rev)
		res := &Location{Lane: l.ID, Repo: repo, Revision: filepath.Base(srcSnap), Path: srcSnap}
		dstSnap, err := snapshotDir(l.Dst, folder, rev)
		switch {
		case l.State != StateStaged:
			res.Reason = laneUnverified(l, "")
		case err != nil:
			res.Reason = "revision " + rev + " is not staged"
		default:
			commit := filepath.Base(dstSnap)
			why := laneUnverified(l, folder+"/snapshots/"+commit+"/")
			if why == "" {
				res.Revision, res.Path, res.Staged = commit, dstSnap, true
				e.touch(ctx, l.ID)
				return res, nil
			}
			res.Reason = why
		}
		if srcErr == nil && fallback == nil {
			fallback = res
		}
	}
	if fallback == nil {
		return nil, fmt.Errorf("stage locate %s: no lane on node %s mirrors it: %w", ref, e.st.Node, errdefs.ErrNotFound)
	}
	return fallback, nil
}

// snapshotDir is the snapshot folder of a repository at rev (a commit, or
// a ref read from refs/) in a hub cache.
func snapshotDir(cache, folder, rev string) (string, error) {
	commit := rev
	if !gitSHA1NameRE.MatchString(rev) {
		if !localPath(rev) {
			return "", fmt.Errorf("bad revision %q: %w", rev, errdefs.ErrInvalidArgument)
		}
		raw, err := os.ReadFile(filepath.Join(cache, folder, "refs", filepath.FromSlash(rev)))
		if err != nil {
			return "", err
		}
		commit = strings.TrimSpace(string(raw))
		if !gitSHA1NameRE.MatchString(commit) {
			return "", fmt.Errorf("refs/%s holds %q, not a commit: %w", rev, commit, errdefs.ErrDataLoss)
		}
	}
	dir := filepath.Join(cache, folder, "snapshots", commit)
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a folder: %w", dir, errdefs.ErrDataLoss)
	}
	return dir, nil
}

// laneUnverified says why a lane's staged files below prefix (all, when
// empty) cannot be used as they are ("" when they can): the lane is not
// staged, or a file changed or went since it was verified.
func laneUnverified(l *Ledger, prefix string) string {
	if l.State == "" {
		return "never staged on this node"
	}
	if l.State != StateStaged {
		return "not staged (lane " + l.State + ")"
	}
	n := 0
	for _, en := range l.Entries {
		if !strings.HasPrefix(en.Path, prefix) {
			continue
		}
		n++
		dst := filepath.Join(l.Dst, filepath.FromSlash(en.Path))
		switch en.Kind {
		case EntryLink:
			target, err := os.Readlink(dst)
			if err != nil || target != en.Target {
				return "staged link " + en.Path + " changed"
			}
			blob, ok := l.Entry(filepath.ToSlash(filepath.Join(filepath.Dir(en.Path), en.Target)))
			if !ok || !dstMatches(filepath.Join(l.Dst, filepath.FromSlash(blob.Path)), blob) {
				return "the blob of staged link " + en.Path + " changed"
			}
		default:
			if !dstMatches(dst, en) {
				return "staged file " + en.Path + " changed"
			}
		}
	}
	if n == 0 {
		return "nothing staged below " + prefix
	}
	return ""
}

// touch records a use of a lane, unless it is being staged or evicted.
func (e *Engine) touch(ctx context.Context, id string) {
	lk, err := e.st.lock(id)
	if err != nil {
		return
	}
	defer lk.unlock()
	l, err := e.st.Load(id)
	if err != nil {
		return
	}
	l.LastUsed = time.Now()
	if err := e.st.Save(l, artifact.Volatile); err != nil {
		log.G(ctx).WithError(err).WithField("lane", id).Warn("staging: could not record a use")
	}
}

// Producer is the local producer of a staged checkpoint: the passthrough
// producer, reading a hub snapshot's staged, verified copy on this node
// instead of its (network) source when there is one. Its identity is the
// source's passthrough identity either way, so it stands in for
// producers.Passthrough wherever resolution registers that.
type Producer struct {
	producers.Passthrough
	Engine *Engine
}

// Producer implements producers.Recipe. The staged copy is looked up when
// the producer runs, under its context.
func (p Producer) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	return &stagedProducer{recipe: p, src: src}, nil
}

// stagedProducer is the passthrough producer of src's staged copy, or of
// src when none is staged.
type stagedProducer struct {
	recipe Producer
	src    *artifact.SourceDir
	inner  artifact.Producer // set by Produce
}

func (s *stagedProducer) Name() string { return s.recipe.Name() }

func (s *stagedProducer) Produce(ctx context.Context, w artifact.Writer) error {
	src := s.src
	if root, err := s.recipe.stagedCopy(ctx, src); err == nil {
		src = &artifact.SourceDir{Root: root, Files: src.Files}
	}
	inner, err := s.recipe.Passthrough.Producer(src)
	if err != nil {
		return err
	}
	s.inner = inner
	return inner.Produce(ctx, w)
}

// SourceBytesRead implements producers.SourceCounter.
func (s *stagedProducer) SourceBytesRead() int64 {
	if c, ok := s.inner.(producers.SourceCounter); ok {
		return c.SourceBytesRead()
	}
	return 0
}

// stagedCopy is the staged, verified copy of a source snapshot folder that
// holds every file of src.
func (p Producer) stagedCopy(ctx context.Context, src *artifact.SourceDir) (string, error) {
	ledgers, err := p.Engine.ledgers(ctx)
	if err != nil {
		return "", err
	}
	root := filepath.Clean(src.Root)
	for _, l := range ledgers {
		rel, err := filepath.Rel(l.Src, root)
		if l.Kind != KindHubMirror || err != nil || !localPath(filepath.ToSlash(rel)) {
			continue
		}
		prefix := filepath.ToSlash(rel) + "/"
		if laneUnverified(l, prefix) != "" {
			continue
		}
		complete := true
		for _, f := range src.Files {
			if _, ok := l.Entry(prefix + f.Path); !ok {
				complete = false
				break
			}
		}
		if complete {
			p.Engine.touch(ctx, l.ID)
			return filepath.Join(l.Dst, rel), nil
		}
	}
	return "", fmt.Errorf("%s is not staged on node %s: %w", root, p.Engine.st.Node, errdefs.ErrNotFound)
}

// Snapshot is a staged, verified hub snapshot.
type Snapshot struct {
	Lane     string `json:"lane"`
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Dir      string `json:"dir"`
}

// Snapshots lists the staged, verified snapshots of a hub-mirror lane.
func (e *Engine) Snapshots(ctx context.Context, id string) ([]Snapshot, error) {
	l, err := e.st.Load(id)
	if err != nil {
		return nil, err
	}
	if l.Kind != KindHubMirror {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []Snapshot
	for _, en := range l.Entries {
		parts := strings.SplitN(en.Path, "/", 4)
		if len(parts) < 4 || parts[1] != "snapshots" || seen[parts[0]+"/"+parts[2]] {
			continue
		}
		prefix := parts[0] + "/snapshots/" + parts[2]
		seen[parts[0]+"/"+parts[2]] = true
		if laneUnverified(l, prefix+"/") == "" {
			out = append(out, Snapshot{Lane: id, Repo: repoName(parts[0]), Revision: parts[2], Dir: filepath.Join(l.Dst, filepath.FromSlash(prefix))})
		}
	}
	return out, nil
}
