package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
)

// An unpack that does not pass layer annotations to the snapshotter
// (containerd's client-side Image.Unpack, which the CRI uses for an image
// volume whose image was pulled for another snapshotter) prepares a pointer
// layer as an ordinary one and applies its tar. Commit recognises such a
// layer by its files and makes it a weight snapshot all the same.

// maxPointerLayerEntries bounds the look at a layer's files: a pointer
// layer holds its target's directories, .weightsnap/, pointers/, one
// pointer file and perhaps a notice, so any larger layer is ordinary after
// this many entries.
const maxPointerLayerEntries = 64

// isPointerFile says whether rel is a pointer file's path in a layer:
// <target>/<pointer.Dir>/<ID hex>.json.
func isPointerFile(rel string) bool {
	parent, name := filepath.Split(rel)
	target, inDir := strings.CutSuffix(parent, "/"+pointer.Dir+"/")
	hex, isJSON := strings.CutSuffix(name, ".json")
	_, err := artifact.ParseIDHex(hex)
	return inDir && isJSON && target != "" && err == nil
}

// errNotPointer ends the walk of a layer that is not a pointer layer.
var errNotPointer = errors.New("not a pointer layer")

// pointerInLayer reads the pointer of a layer whose files (in dir, the
// active snapshot's own directory) are nothing but one pointer file, the
// directories that lead to it and, in layers built since it was added, the
// notice file (pointer.NoticeName, at most pointer.MaxNoticeBytes) in the
// pointer's target directory; ok is false for any other layer. The
// pointer file is untrusted (pointer.ParseFile) and must sit where its own
// target puts it, and so must the notice.
func pointerInLayer(dir string) (ptr pointer.Pointer, ok bool, err error) {
	var file, notice string
	var dirs []string
	entries := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if entries++; entries > maxPointerLayerEntries {
			return errNotPointer
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
		case d.Type().IsRegular() && file == "" && isPointerFile(rel):
			file = rel
		case d.Type().IsRegular() && notice == "" && d.Name() == pointer.NoticeName:
			if fi, err := d.Info(); err != nil || fi.Size() > pointer.MaxNoticeBytes {
				return errNotPointer
			}
			notice = rel
		default:
			return errNotPointer
		}
		return nil
	})
	if errors.Is(err, errNotPointer) || (err == nil && file == "") {
		return pointer.Pointer{}, false, nil
	}
	if err != nil {
		return pointer.Pointer{}, false, fmt.Errorf("look for a pointer in the layer: %w", err)
	}
	for _, d := range dirs {
		if !strings.HasPrefix(file, d+"/") {
			return pointer.Pointer{}, false, nil // a directory beside the pointer: an ordinary layer
		}
	}
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return pointer.Pointer{}, false, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, 64<<10)) // pointer.ParseFile refuses more than 4 KiB
	if err != nil {
		return pointer.Pointer{}, false, err
	}
	if ptr, err = pointer.ParseFile(raw); err != nil {
		return pointer.Pointer{}, true, err
	}
	if pointer.Path(ptr) != "/"+file {
		return pointer.Pointer{}, true, fmt.Errorf("pointer file at /%s names target %s: %w", file, ptr.Target, errNotPointer)
	}
	if notice != "" && pointer.NoticePath(ptr) != "/"+notice {
		return pointer.Pointer{}, false, nil // a file beside the pointer: an ordinary layer
	}
	return ptr, true, nil
}

// commitFound commits the active snapshot key. A pointer layer unpacked
// without its labels becomes a weight snapshot, labelled with its pointer,
// as its Prepare would have made it: the artifact linked in, or, when it
// cannot be had, the pointer as it is, marked a fallback (preferred mode)
// or refused (required mode). Any other layer is committed as it is.
func (s *Snapshotter) commitFound(ctx context.Context, name, key string, opts []snapshots.Opt) error {
	mounts, err := s.overlay.Mounts(ctx, key)
	if err != nil {
		return s.overlay.Commit(ctx, name, key, opts...)
	}
	dir, err := snapshotDir(mounts)
	if err != nil {
		return s.overlay.Commit(ctx, name, key, opts...)
	}
	ptr, ok, err := pointerInLayer(dir)
	if err != nil {
		log.G(ctx).WithError(err).WithField("key", key).Warn("a layer's pointer file is not usable: committed as an ordinary layer")
	}
	if !ok || err != nil {
		return s.overlay.Commit(ctx, name, key, opts...)
	}

	start := time.Now()
	opts = append(opts, snapshots.WithLabels(pointer.Labels(ptr)))
	var outcome, source string
	h, rep, rerr := s.leases.acquire(ctx, ptr)
	switch {
	case rerr == nil:
		outcome, source = resolvedOutcome(rep)
		err = s.commitAndFill(ctx, h, ptr, source, mounts, name, key, opts...)
		s.leases.finish(h)
	case s.modeOf(ptr) == resolve.Preferred:
		outcome = OutcomeFallback
		s.metrics.fallbacks.Inc()
		if err = s.overlay.Commit(ctx, name, key, append(opts, markFallback())...); err == nil {
			s.repairs.add(ptr, name)
		}
	default:
		outcome, err = OutcomeFailed, weightErr(ptr, rerr)
	}
	if err != nil && outcome != OutcomeFailed {
		outcome = OutcomeError
	}
	s.metrics.weight(outcome, time.Since(start))
	l := log.G(ctx).WithField("id", ptr.ID).WithField("artifact", ptr.Artifact).WithField("target", ptr.Target).
		WithField("source", source).WithField("outcome", outcome).WithField("seconds", time.Since(start).Seconds()).WithField("key", key)
	if err != nil {
		l = l.WithError(err)
	} else if rerr != nil {
		l = l.WithError(rerr)
	}
	l.Info("weight layer found at commit: its pointer layer was unpacked without its labels")
	return err
}
