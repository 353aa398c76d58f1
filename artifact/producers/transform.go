package producers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
)

// segment is a run of a source tensor's bytes, or a run of zero padding;
// off and n are in source bytes, off relative to the tensor's data.
type segment struct {
	off, n int64
	zero   bool
}

// tensorPlan is how one output tensor is made from one source tensor.
type tensorPlan struct {
	src      artifact.TensorInfo
	outDType string
	outShape []int64
	from, to string // dtype conversion; both "" for none
	outLen   int64  // source bytes the segments cover (padding included)
	walk     func(visit func(segment) error) error
}

// tensorFunc plans one tensor of a source shard.
type tensorFunc func(t artifact.TensorInfo) (*tensorPlan, error)

// transform streams a safetensors checkpoint through a tensor-wise rewrite:
// each source shard becomes an output shard of the same name holding the
// rewritten tensors in the same order; a *.safetensors.index.json gets its
// metadata.total_size updated; every other file is copied verbatim.
type transform struct {
	name   string
	src    *artifact.SourceDir
	tensor tensorFunc
	read   atomic.Int64
}

// Name implements artifact.Producer.
func (t *transform) Name() string { return t.name }

// SourceBytesRead implements SourceCounter.
func (t *transform) SourceBytesRead() int64 { return t.read.Load() }

// Progress implements artifact.ProgressReporter: the source bytes read of
// the source's (a split reads only its rank's rows of some tensors).
func (t *transform) Progress() (done, total int64) { return t.read.Load(), t.src.TotalBytes() }

// shardPlan is one output shard.
type shardPlan struct {
	file    artifact.SourceFile
	stamp   artifact.Stamp // when the header was read
	srcData int64          // the source's data start, from its validated header
	header  []byte
	tensors []*tensorPlan
	total   int64
}

// Produce implements artifact.Producer.
func (t *transform) Produce(ctx context.Context, w artifact.Writer) error {
	var shards []*shardPlan
	var dataBytes int64
	for _, sf := range t.src.Files {
		if !artifact.IsSafetensors(sf.Path) {
			continue
		}
		sp, err := t.planShard(sf)
		if err != nil {
			return err
		}
		shards = append(shards, sp)
		dataBytes += sp.total - int64(len(sp.header))
	}
	if len(shards) == 0 {
		return fmt.Errorf("%s: no safetensors files in %s: %w", t.name, t.src.Root, errdefs.ErrInvalidArgument)
	}
	for _, sp := range shards {
		if err := t.writeShard(ctx, w, sp); err != nil {
			return fmt.Errorf("%s: %s: %w", t.name, sp.file.Path, err)
		}
	}
	for _, sf := range t.src.Files {
		if artifact.IsSafetensors(sf.Path) {
			continue
		}
		var err error
		if strings.HasSuffix(sf.Path, ".safetensors.index.json") {
			err = t.writeIndexJSON(ctx, w, sf, dataBytes)
		} else {
			err = t.copyFile(ctx, w, sf)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", t.name, sf.Path, err)
		}
	}
	return nil
}

func (t *transform) open(sf artifact.SourceFile) (*artifact.Source, error) {
	f, err := artifact.OpenSource(filepath.Join(t.src.Root, filepath.FromSlash(sf.Path)), sf.Path)
	if err != nil {
		return nil, err
	}
	if f.Stamp.Size != sf.Size {
		f.Close()
		return nil, &artifact.SourceMismatchError{Path: sf.Path, Want: fmt.Sprintf("%d bytes", sf.Size), Got: fmt.Sprintf("%d bytes", f.Stamp.Size)}
	}
	return f, nil
}

// planShard reads a source shard's header and plans its output.
func (t *transform) planShard(sf artifact.SourceFile) (*shardPlan, error) {
	f, err := t.open(sf)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := artifact.ReadHeader(f, sf.Size)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", t.name, sf.Path, err)
	}
	t.read.Add(h.DataStart())
	sp := &shardPlan{file: sf, stamp: f.Stamp, srcData: h.DataStart()}
	specs := make([]artifact.TensorSpec, len(h.Tensors))
	for i, ti := range h.Tensors {
		tp, err := t.tensor(ti)
		if err != nil {
			return nil, err
		}
		if want := ti.End - ti.Begin; !tp.inside(want) {
			return nil, fmt.Errorf("%s: tensor %q: plan covers %d source bytes: %w", t.name, ti.Name, tp.outLen, errdefs.ErrInternal)
		}
		sp.tensors = append(sp.tensors, tp)
		specs[i] = artifact.TensorSpec{Name: ti.Name, DType: tp.outDType, Shape: tp.outShape}
	}
	var infos []artifact.TensorInfo
	sp.header, infos, sp.total, err = artifact.PlanSafetensors(specs, h.Metadata)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", t.name, sf.Path, err)
	}
	for i, tp := range sp.tensors {
		got := infos[i].End - infos[i].Begin
		want := tp.outLen
		if tp.from != "" {
			want = want / int64(cast.ElemSize(tp.from)) * int64(cast.ElemSize(tp.to))
		}
		if got != want {
			return nil, fmt.Errorf("%s: tensor %q: output is %d bytes, segments give %d: %w", t.name, tp.src.Name, got, want, errdefs.ErrInternal)
		}
	}
	return sp, nil
}

// inside is a sanity check of a plan's segments against the source: they
// never reach past the source tensor.
func (tp *tensorPlan) inside(srcLen int64) bool {
	ok := true
	tp.walk(func(s segment) error {
		if !s.zero && (s.off < 0 || s.off+s.n > srcLen) {
			ok = false
		}
		return nil
	})
	return ok
}

// writeShard streams one output shard through w.
func (t *transform) writeShard(ctx context.Context, w artifact.Writer, sp *shardPlan) (err error) {
	f, err := t.open(sp.file)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Stamp != sp.stamp {
		return &artifact.SourceMismatchError{Path: sp.file.Path, Want: "unchanged", Got: "modified after its header was read"}
	}
	out, err := w.Create(sp.file.Path, sp.total)
	if err != nil {
		return err
	}
	e := newEmitter(ctx, out)
	defer func() {
		if cerr := e.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return // the store discards the unfinished file with the build
		}
		if err = f.Unchanged(); err == nil {
			err = out.Close()
		}
	}()
	if err := e.write(sp.header); err != nil {
		return err
	}
	win := &window{buf: make([]byte, windowSize), read: &t.read}
	for _, tp := range sp.tensors {
		if err := emitTensor(e, win, f.File, sp.srcData+tp.src.Begin, tp, &t.read); err != nil {
			return fmt.Errorf("tensor %q: %w", tp.src.Name, err)
		}
	}
	return nil
}

// emitTensor appends the output of one tensor plan to e: its segments of
// the source tensor whose data starts at file offset base in f (read
// straight into the buffers when long, through win otherwise), its zero
// padding, converted when the plan casts.
func emitTensor(e *emitter, win *window, f *os.File, base int64, tp *tensorPlan, read *atomic.Int64) error {
	win.reset(f, base, tp.src.End-tp.src.Begin)
	e.from, e.to = tp.from, tp.to
	return tp.walk(func(s segment) error {
		switch {
		case s.zero:
			return e.zeros(s.n)
		case tp.from == "" && s.n >= directMin:
			return e.readDirect(f, base+s.off, s.n, read)
		case tp.from == "":
			b, err := win.slice(s.off, s.n)
			if err != nil {
				return err
			}
			return e.write(b)
		}
		for off, left := s.off, s.n; left > 0; {
			c := min(left, int64(windowSize))
			b, err := win.slice(off, c)
			if err != nil {
				return err
			}
			if err := e.convert(b); err != nil {
				return err
			}
			off += c
			left -= c
		}
		return nil
	})
}

// copyFile copies a file verbatim (artifact.CopyVerbatim), counting the bytes read.
func (t *transform) copyFile(ctx context.Context, w artifact.Writer, sf artifact.SourceFile) error {
	return artifact.CopyVerbatim(ctx, w, t.src.Root, sf, func(n int64) { t.read.Add(n) })
}

// writeIndexJSON rewrites a Hugging Face shard index with the new
// metadata.total_size (the bytes of all tensor data); everything else is
// kept. A file that is not such an index is copied verbatim.
func (t *transform) writeIndexJSON(ctx context.Context, w artifact.Writer, sf artifact.SourceFile, total int64) error {
	f, err := t.open(sf)
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(io.LimitReader(f, sf.Size+1))
	t.read.Add(int64(len(raw)))
	if err == nil {
		err = f.Unchanged()
	}
	f.Close()
	if err != nil {
		return err
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	meta, isIndex := map[string]any(nil), false
	if dec.Decode(&doc) == nil {
		meta, isIndex = doc["metadata"].(map[string]any)
	}
	if !isIndex {
		return t.copyFile(ctx, w, sf)
	}
	meta["total_size"] = total
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	out, err := w.Create(sf.Path, int64(buf.Len()))
	if err != nil {
		return err
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
