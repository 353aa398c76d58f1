package producers

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
)

const (
	vllmShardedVersion = "1"
	vllmShardedImpl    = "weightsnap tp-split vllm-sharded v1: the state dict vLLM's ShardedStateLoader.save_model writes for " +
		"tensor-parallel rank r of N of a LlamaForCausalLM (artifact/tpsplit.VLLMLlama: vllm-project/vllm " +
		"sharded_state_loader.py @ 01ed47b4, linear.py @ 0036d38d, vocab_parallel_embedding.py, attention.py @ 71169c16), " +
		"parts model-rank-{rank}-part-{part}.safetensors split before max_size, tensors in state-dict order without metadata, " +
		"F32/F16/BF16 tensors cast with artifact/cast when a dtype is asked for (the attention scales stay F32), " +
		"other files verbatim except *.bin, *.pt, *.safetensors and *.safetensors.index.json"
	vllmLayoutPrefix = LayoutVLLMSharded + "+max-part-"
	// configBound bounds config.json.
	configBound = 1 << 20
)

// VLLMShardedRef is the identity fields of tp-split writing vLLM's layout.
func VLLMShardedRef() artifact.ProducerRef {
	return RefOf(TPSplitName, vllmShardedVersion, vllmShardedImpl)
}

// VLLMLayoutName is the layout name of a vllm-sharded identity:
// "vllm-sharded+max-part-<bytes>" (the part bound changes which tensors
// share a file, so it is part of the identity).
func VLLMLayoutName(maxPartSize int64) string {
	return vllmLayoutPrefix + strconv.FormatInt(maxPartSize, 10)
}

// ParseVLLMLayoutName returns the part bound of a VLLMLayoutName, and
// whether name is one.
func ParseVLLMLayoutName(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, vllmLayoutPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	return n, true
}

func (p *TPSplit) maxPartSize() int64 {
	if p.MaxPartSize > 0 {
		return p.MaxPartSize
	}
	return tpsplit.VLLMDefaultMaxPartSize
}

// readLlamaConfig reads and checks the source's config.json for tpSize.
func readLlamaConfig(src *artifact.SourceDir, tpSize int) (*tpsplit.LlamaConfig, error) {
	for _, sf := range src.Files {
		if sf.Path != "config.json" {
			continue
		}
		if sf.Size > configBound {
			return nil, fmt.Errorf("%s: config.json is %d bytes, over %d: %w", LayoutVLLMSharded, sf.Size, configBound, errdefs.ErrInvalidArgument)
		}
		f, err := artifact.OpenSource(filepath.Join(src.Root, sf.Path), sf.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		raw, err := io.ReadAll(io.LimitReader(f, configBound+1))
		if err == nil && int64(len(raw)) != sf.Size {
			err = &artifact.SourceMismatchError{Path: sf.Path, Want: fmt.Sprintf("%d bytes", sf.Size), Got: fmt.Sprintf("%d bytes", len(raw))}
		}
		if err != nil {
			return nil, err
		}
		c, err := tpsplit.ParseLlamaConfig(raw)
		if err != nil {
			return nil, err
		}
		return c, c.Check(tpSize)
	}
	return nil, fmt.Errorf("%s: no config.json in %s (the architecture and sizes come from it): %w", LayoutVLLMSharded, src.Root, errdefs.ErrInvalidArgument)
}

// vllmSharded writes vLLM's sharded-state layout for one rank.
type vllmSharded struct {
	split *TPSplit
	src   *artifact.SourceDir
	read  atomic.Int64
}

// Name implements artifact.Producer.
func (v *vllmSharded) Name() string { return TPSplitName }

// SourceBytesRead implements SourceCounter.
func (v *vllmSharded) SourceBytesRead() int64 { return v.read.Load() }

// Progress implements artifact.ProgressReporter.
func (v *vllmSharded) Progress() (done, total int64) { return v.read.Load(), v.src.TotalBytes() }

// srcTensor is a source tensor and the open shard that holds it.
type srcTensor struct {
	f    *artifact.Source
	data int64 // the shard's data start
	info artifact.TensorInfo
}

// outTensor is one planned output tensor: its pieces, each a source
// tensor plan or constant bytes.
type outTensor struct {
	spec   artifact.TensorSpec
	pieces []outPiece
	length int64 // output bytes
}

type outPiece struct {
	st    *srcTensor
	plan  *tensorPlan
	bytes []byte // a constant piece
}

// Produce implements artifact.Producer.
func (v *vllmSharded) Produce(ctx context.Context, w artifact.Writer) error {
	fail := func(err error) error { return fmt.Errorf("%s %s: %w", TPSplitName, LayoutVLLMSharded, err) }
	cfg, err := readLlamaConfig(v.src, v.split.Size)
	if err != nil {
		return fail(err)
	}
	tensors, files, err := v.openShards()
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		return fail(err)
	}
	infos := make(map[string]artifact.TensorInfo, len(tensors))
	for name, st := range tensors {
		infos[name] = st.info
	}
	plan, err := tpsplit.VLLMLlama(cfg, infos, v.split.Size, v.split.Rank)
	if err != nil {
		return fail(err)
	}
	outs := make([]*outTensor, len(plan))
	sizes := make([]int64, len(plan))
	for i, vt := range plan {
		if outs[i], err = v.planTensor(vt, tensors); err != nil {
			return fail(err)
		}
		sizes[i] = outs[i].length
	}
	for part, idx := range tpsplit.VLLMParts(sizes, v.split.maxPartSize()) {
		name := tpsplit.VLLMFileName(v.split.Rank, part)
		if err := v.writePart(ctx, w, name, outs, idx); err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
	}
	for _, sf := range v.src.Files {
		if vllmDropped(sf.Path) {
			continue
		}
		if err := artifact.CopyVerbatim(ctx, w, v.src.Root, sf, func(n int64) { v.read.Add(n) }); err != nil {
			return fail(fmt.Errorf("%s: %w", sf.Path, err))
		}
	}
	return nil
}

// vllmDropped: the source's weights (save_sharded_state.py copies every
// file but *.bin, *.pt and *.safetensors) and its shard index, which would
// name files this layout does not have.
func vllmDropped(p string) bool {
	switch path.Ext(p) {
	case ".bin", ".pt", ".safetensors":
		return true
	}
	return strings.HasSuffix(p, ".safetensors.index.json")
}

// openShards reads every source shard's header; the shards stay open for
// the writes (the caller closes files, also on error).
func (v *vllmSharded) openShards() (map[string]*srcTensor, []*artifact.Source, error) {
	tensors := map[string]*srcTensor{}
	var files []*artifact.Source
	for _, sf := range v.src.Files {
		if !artifact.IsSafetensors(sf.Path) {
			continue
		}
		f, err := artifact.OpenSource(filepath.Join(v.src.Root, filepath.FromSlash(sf.Path)), sf.Path)
		if err != nil {
			return nil, files, err
		}
		files = append(files, f)
		if f.Stamp.Size != sf.Size {
			return nil, files, &artifact.SourceMismatchError{Path: sf.Path, Want: fmt.Sprintf("%d bytes", sf.Size), Got: fmt.Sprintf("%d bytes", f.Stamp.Size)}
		}
		h, err := artifact.ReadHeader(f, sf.Size)
		if err != nil {
			return nil, files, fmt.Errorf("%s: %w", sf.Path, err)
		}
		v.read.Add(h.DataStart())
		for _, ti := range h.Tensors {
			if prev, dup := tensors[ti.Name]; dup {
				return nil, files, fmt.Errorf("tensor %q is in both %s and %s: %w", ti.Name, prev.f.Path, sf.Path, errdefs.ErrInvalidArgument)
			}
			tensors[ti.Name] = &srcTensor{f: f, data: h.DataStart(), info: ti}
		}
	}
	if len(files) == 0 {
		return nil, files, fmt.Errorf("no safetensors files in %s: %w", v.src.Root, errdefs.ErrInvalidArgument)
	}
	return tensors, files, nil
}

// planTensor plans one output tensor's pieces, cast as asked.
func (v *vllmSharded) planTensor(vt tpsplit.VLLMTensor, tensors map[string]*srcTensor) (*outTensor, error) {
	ot := &outTensor{spec: artifact.TensorSpec{Name: vt.Name, DType: vt.DType, Shape: vt.Shape}}
	for _, p := range vt.Pieces {
		if p.Tensor == "" {
			ot.pieces = append(ot.pieces, outPiece{bytes: p.Const})
			ot.length += int64(len(p.Const))
			continue
		}
		st := tensors[p.Tensor]
		tp, err := piecePlan(p, st.info, v.split.DType)
		if err != nil {
			return nil, err
		}
		if ot.spec.DType != "" && ot.spec.DType != tp.outDType {
			return nil, fmt.Errorf("tensor %q: pieces of dtypes %s and %s: %w", vt.Name, ot.spec.DType, tp.outDType, errdefs.ErrInvalidArgument)
		}
		ot.spec.DType = tp.outDType
		n := tp.outLen
		if tp.from != "" {
			n = n / int64(cast.ElemSize(tp.from)) * int64(cast.ElemSize(tp.to))
		}
		ot.length += n
		ot.pieces = append(ot.pieces, outPiece{st: st, plan: tp})
	}
	dt, _ := artifact.LookupDType(ot.spec.DType)
	if want, _ := dt.TensorBytes(vt.Shape); want != ot.length {
		return nil, fmt.Errorf("tensor %q: pieces give %d bytes, shape %v of %s is %d: %w", vt.Name, ot.length, vt.Shape, ot.spec.DType, want, errdefs.ErrInternal)
	}
	return ot, nil
}

// piecePlan is the segments of one piece of a source tensor: for each
// index of the dimensions before Dim, Len indices of Dim from Start, then
// Pad zero indices.
func piecePlan(p tpsplit.Piece, ti artifact.TensorInfo, dtype string) (*tensorPlan, error) {
	tp := &tensorPlan{src: ti, outDType: ti.DType}
	if err := castPlan(tp, ti, dtype); err != nil {
		return nil, err
	}
	n := ti.End - ti.Begin
	if p.Dim < 0 {
		tp.outLen = n
		tp.walk = func(visit func(segment) error) error {
			if n == 0 {
				return nil
			}
			return visit(segment{n: n})
		}
		return tp, nil
	}
	if p.Dim >= len(ti.Shape) || p.Start < 0 || p.Len < 0 || p.Pad < 0 || p.Start+p.Len > ti.Shape[p.Dim] {
		return nil, fmt.Errorf("tensor %q: piece [%d,+%d) of dim %d outside shape %v: %w", ti.Name, p.Start, p.Len, p.Dim, ti.Shape, errdefs.ErrInternal)
	}
	dt, _ := artifact.LookupDType(ti.DType)
	outer, inner := int64(1), int64(dt.Bits/8)
	for _, d := range ti.Shape[:p.Dim] {
		outer *= d
	}
	for _, d := range ti.Shape[p.Dim+1:] {
		inner *= d
	}
	stride, run, pad := ti.Shape[p.Dim]*inner, p.Len*inner, p.Pad*inner
	tp.outLen = outer * (run + pad)
	tp.walk = func(visit func(segment) error) error {
		for o := range outer {
			if run > 0 {
				if err := visit(segment{off: o*stride + p.Start*inner, n: run}); err != nil {
					return err
				}
			}
			if pad > 0 {
				if err := visit(segment{n: pad, zero: true}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if !tp.inside(n) {
		return nil, fmt.Errorf("tensor %q: piece reaches past the tensor: %w", ti.Name, errdefs.ErrInternal)
	}
	return tp, nil
}

// writePart streams one part file: the tensors outs[idx...] in order.
func (v *vllmSharded) writePart(ctx context.Context, w artifact.Writer, name string, outs []*outTensor, idx []int) (err error) {
	specs := make([]artifact.TensorSpec, len(idx))
	for i, j := range idx {
		specs[i] = outs[j].spec
	}
	header, infos, total, err := artifact.PlanSafetensors(specs, nil)
	if err != nil {
		return err
	}
	for i, j := range idx {
		if got := infos[i].End - infos[i].Begin; got != outs[j].length {
			return fmt.Errorf("tensor %q: %d bytes planned, %d written: %w", specs[i].Name, got, outs[j].length, errdefs.ErrInternal)
		}
	}
	out, err := w.Create(name, total)
	if err != nil {
		return err
	}
	e := newEmitter(ctx, out)
	used := map[*artifact.Source]bool{}
	defer func() {
		if cerr := e.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return // the store discards the unfinished file with the build
		}
		for f := range used {
			if err = f.Unchanged(); err != nil {
				return
			}
		}
		err = out.Close()
	}()
	if err := e.write(header); err != nil {
		return err
	}
	win := &window{buf: make([]byte, windowSize), read: &v.read}
	for _, j := range idx {
		for _, p := range outs[j].pieces {
			if p.plan == nil {
				e.from, e.to = "", ""
				if err := e.write(p.bytes); err != nil {
					return err
				}
				continue
			}
			used[p.st.f] = true
			if err := emitTensor(e, win, p.st.f.File, p.st.data+p.st.info.Begin, p.plan, &v.read); err != nil {
				return fmt.Errorf("tensor %q from %q: %w", outs[j].spec.Name, p.st.info.Name, err)
			}
		}
	}
	return nil
}
