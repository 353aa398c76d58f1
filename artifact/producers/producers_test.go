package producers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/cast"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/artifact/tpsplit"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// engineSpec exercises every kind of rule: column with vocabulary padding,
// plain column, row, row with dim and padding, 1-D row (replicated), empty
// tensors and the replicated default.
const engineSpec = `
name = "engine-test"
[[rule]]
pattern = "embed.weight"
split = "column"
pad_to_multiple = 64
[[rule]]
pattern = "big.weight"
split = "column"
[[rule]]
pattern = "row.weight"
split = "row"
[[rule]]
pattern = "rowpad.weight"
split = "row"
dim = -1
pad_to_multiple = 2
[[rule]]
pattern = "bias"
split = "row"
[[rule]]
pattern = "empty"
split = "column"
`

func tensor(name, dtype string, seed uint64, shape ...int64) artifact.WriteTensor {
	dt, _ := artifact.LookupDType(dtype)
	n, _ := dt.TensorBytes(shape)
	data := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range data {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		data[i] = byte(x)
	}
	return artifact.WriteTensor{Name: name, DType: dtype, Shape: shape, Data: data}
}

// engineCheckpoint writes a two-shard checkpoint with a shard index and a config.
func engineCheckpoint(t *testing.T) (string, map[string]artifact.WriteTensor) {
	t.Helper()
	dir := t.TempDir()
	shards := map[string][]artifact.WriteTensor{
		"model-00001-of-00002.safetensors": {
			tensor("embed.weight", "F32", 1, 1000, 48),
			tensor("big.weight", "F32", 2, 6144, 256),
		},
		"model-00002-of-00002.safetensors": {
			tensor("row.weight", "BF16", 3, 96, 3000),
			tensor("rowpad.weight", "I64", 4, 5, 7),
			tensor("bias", "F32", 5, 3000),
			tensor("scalar", "F32", 6),
			tensor("empty", "F16", 7, 0, 4),
			tensor("u8.mask", "U8", 8, 33),
		},
	}
	all := map[string]artifact.WriteTensor{}
	weightMap := map[string]string{}
	for name, ts := range shards {
		var buf bytes.Buffer
		if _, err := artifact.WriteSafetensors(&buf, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			all[x.Name] = x
			weightMap[x.Name] = name
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": weightMap})
	for name, data := range map[string][]byte{"model.safetensors.index.json": idx, "config.json": []byte(`{"model_type":"test"}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, all
}

func scan(t *testing.T, dir string) *artifact.SourceDir {
	t.Helper()
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func produce(t *testing.T, r producers.Local, src *artifact.SourceDir) (*storetest.MemWriter, artifact.Producer) {
	t.Helper()
	p, err := r.Producer(src)
	if err != nil {
		t.Fatal(err)
	}
	w := &storetest.MemWriter{}
	if err := p.Produce(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return w, p
}

// readTensors parses a produced safetensors file.
func readTensors(t *testing.T, raw []byte) (*artifact.Header, map[string][]byte) {
	t.Helper()
	h, err := artifact.ReadHeader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, ti := range h.Tensors {
		out[ti.Name] = raw[h.DataStart()+ti.Begin : h.DataStart()+ti.End]
	}
	return h, out
}

// TestTPSplitMatchesExtract checks the streaming tp-split producer against
// the whole-tensor reference of artifact/tpsplit (Extract) followed by
// artifact/cast (Convert), for every rank, with and without a cast.
func TestTPSplitMatchesExtract(t *testing.T) {
	dir, tensors := engineCheckpoint(t)
	src := scan(t, dir)
	spec, err := tpsplit.ParseSpec([]byte(engineSpec))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		size  int
		dtype string
	}{
		{"tp2", 2, ""},
		{"tp3", 3, ""},
		{"tp2-bf16", 2, "BF16"},
		{"tp3-f16", 3, "F16"},
		{"tp3-f32", 3, "F32"},
		{"tp1-bf16", 1, "BF16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for rank := range tc.size {
				r := &producers.TPSplit{Spec: spec, Size: tc.size, Rank: rank, DType: tc.dtype}
				w, p := produce(t, r, src)
				var dataBytes int64
				for _, sf := range src.Files {
					if !artifact.IsSafetensors(sf.Path) {
						continue
					}
					raw, ok := w.Bytes(sf.Path)
					if !ok {
						t.Fatalf("rank %d: %s not written", rank, sf.Path)
					}
					h, got := readTensors(t, raw)
					if h.Metadata["format"] != "pt" {
						t.Fatalf("metadata not kept: %v", h.Metadata)
					}
					for _, ti := range h.Tensors {
						dataBytes += ti.End - ti.Begin
						orig := tensors[ti.Name]
						plan, err := spec.Plan(orig.Name, orig.DType, orig.Shape, tc.size)
						if err != nil {
							t.Fatal(err)
						}
						want := make([]byte, plan.ShardLen(rank))
						if err := plan.Extract(want, orig.Data, rank); err != nil {
							t.Fatal(err)
						}
						wantDType := orig.DType
						if tc.dtype != "" && cast.Supported(orig.DType, tc.dtype) {
							conv := make([]byte, len(want)/cast.ElemSize(orig.DType)*cast.ElemSize(tc.dtype))
							if err := cast.Convert(conv, want, orig.DType, tc.dtype); err != nil {
								t.Fatal(err)
							}
							want, wantDType = conv, tc.dtype
						}
						if ti.DType != wantDType || !slices.Equal(ti.Shape, plan.ShardShape(rank)) {
							t.Fatalf("rank %d %s: %s%v, want %s%v", rank, ti.Name, ti.DType, ti.Shape, wantDType, plan.ShardShape(rank))
						}
						if !bytes.Equal(got[ti.Name], want) {
							t.Fatalf("rank %d %s: shard bytes differ from Extract", rank, ti.Name)
						}
					}
				}
				if raw, _ := w.Bytes("config.json"); string(raw) != `{"model_type":"test"}` {
					t.Fatalf("config.json not copied verbatim: %q", raw)
				}
				var idx struct {
					Metadata struct {
						TotalSize int64 `json:"total_size"`
					} `json:"metadata"`
					WeightMap map[string]string `json:"weight_map"`
				}
				raw, _ := w.Bytes("model.safetensors.index.json")
				if err := json.Unmarshal(raw, &idx); err != nil || idx.Metadata.TotalSize != dataBytes || len(idx.WeightMap) != len(tensors) {
					t.Fatalf("index json: %v, total_size %d want %d, %d weights", err, idx.Metadata.TotalSize, dataBytes, len(idx.WeightMap))
				}
				if n := p.(producers.SourceCounter).SourceBytesRead(); n <= 0 {
					t.Fatalf("source bytes read %d", n)
				}
			}
		})
	}
}

// TestCastProducerMatchesConvert checks the cast producer keeps integer
// tensors and converts every float tensor as artifact/cast does.
func TestCastProducerMatchesConvert(t *testing.T) {
	dir, tensors := engineCheckpoint(t)
	src := scan(t, dir)
	for _, to := range []string{"F32", "F16", "BF16"} {
		t.Run(to, func(t *testing.T) {
			w, _ := produce(t, &producers.Cast{DType: to}, src)
			for _, sf := range src.Files {
				if !artifact.IsSafetensors(sf.Path) {
					continue
				}
				raw, _ := w.Bytes(sf.Path)
				h, got := readTensors(t, raw)
				for _, ti := range h.Tensors {
					orig := tensors[ti.Name]
					want, wantDType := orig.Data, orig.DType
					if cast.Supported(orig.DType, to) {
						want = make([]byte, len(orig.Data)/cast.ElemSize(orig.DType)*cast.ElemSize(to))
						if err := cast.Convert(want, orig.Data, orig.DType, to); err != nil {
							t.Fatal(err)
						}
						wantDType = to
					}
					if ti.DType != wantDType || !slices.Equal(ti.Shape, orig.Shape) || !bytes.Equal(got[ti.Name], want) {
						t.Fatalf("%s: %s%v differs from the reference", ti.Name, ti.DType, ti.Shape)
					}
				}
			}
		})
	}
}

func TestProducerFailures(t *testing.T) {
	spec := func(doc string) *tpsplit.Spec {
		s, err := tpsplit.ParseSpec([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		tensors []artifact.WriteTensor
		local   producers.Local
		mangle  func(*artifact.SourceDir)
		class   func(error) bool
	}{
		{"tp-split indivisible", []artifact.WriteTensor{tensor("w", "F32", 1, 10, 4)},
			&producers.TPSplit{Spec: spec("name = \"s\"\n[[rule]]\npattern = \"w\"\nsplit = \"column\"\n"), Size: 3}, nil, errdefs.IsInvalidArgument},
		{"cast from F64", []artifact.WriteTensor{tensor("w", "F64", 1, 4)},
			&producers.Cast{DType: "BF16"}, nil, errdefs.IsNotImplemented},
		{"cast to I8", []artifact.WriteTensor{tensor("w", "F32", 1, 4)},
			&producers.Cast{DType: "I8"}, nil, errdefs.IsNotImplemented},
		{"source size changed", []artifact.WriteTensor{tensor("w", "F32", 1, 4)},
			&producers.Cast{DType: "BF16"}, func(s *artifact.SourceDir) { s.Files[0].Size++ }, errdefs.IsDataLoss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var buf bytes.Buffer
			if _, err := artifact.WriteSafetensors(&buf, tc.tensors, nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644)
			src := scan(t, dir)
			if tc.mangle != nil {
				tc.mangle(src)
			}
			p, err := tc.local.Producer(src)
			if err == nil {
				err = p.Produce(context.Background(), &storetest.MemWriter{})
			}
			if err == nil || !tc.class(err) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestTPSplitIdentity(t *testing.T) {
	dir, _ := engineCheckpoint(t)
	src := scan(t, dir)
	a, _ := tpsplit.ParseSpec([]byte(engineSpec))
	b, _ := tpsplit.ParseSpec([]byte("# reformatted\n" + engineSpec + "\n"))
	c, _ := tpsplit.ParseSpec([]byte(engineSpec + "[[rule]]\npattern = \"x\"\nsplit = \"row\"\n"))
	target := producers.Target{Revision: storetest.Revision}
	digest := func(s *tpsplit.Spec, rank int, dtype string) string {
		id, err := (&producers.TPSplit{Spec: s, Size: 3, Rank: rank, DType: dtype}).Identity(src, target)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := id.ID()
		return d.String()
	}
	if digest(a, 0, "") != digest(b, 0, "") {
		t.Fatal("formatting of the layout spec changed the identity")
	}
	for _, other := range []string{digest(c, 0, ""), digest(a, 1, ""), digest(a, 0, "BF16")} {
		if other == digest(a, 0, "") {
			t.Fatal("a different spec, rank or dtype gave the same identity")
		}
	}
	id, _ := (&producers.TPSplit{Spec: a, Size: 3, Rank: 2}).Identity(src, target)
	if want, _ := producers.LayoutName(a); id.Layout.Name != want || id.Layout.TPSize != 3 || id.Layout.TPRank != 2 || id.Producer.Name != producers.TPSplitName {
		t.Fatalf("identity %+v", id)
	}
}

// TestMapRestorerContract: plan validates without mutating; commit runs
// once; a failed commit marks the model partial.
func TestMapRestorerContract(t *testing.T) {
	want := []artifact.TensorSpec{{Name: "a", DType: "F32", Shape: []int64{2}}, {Name: "b", DType: "U8", Shape: []int64{3}}}
	lease := fakeLease{"a": {1, 2, 3, 4, 5, 6, 7, 8}, "b": {9, 10, 11}}
	ctx := context.Background()

	m := producers.NewMapModel(want)
	plan, err := producers.MapRestorer{}.PlanRestore(ctx, lease, m)
	if err != nil || m.Tensors != nil || m.Hydration() != artifact.HydrationEmpty {
		t.Fatalf("plan: %v, model %v %s", err, m.Tensors, m.Hydration())
	}
	if err := plan.Commit(ctx); err != nil || m.Hydration() != artifact.HydrationComplete || !bytes.Equal(m.Tensors["b"], []byte{9, 10, 11}) {
		t.Fatalf("commit: %v %s", err, m.Hydration())
	}
	if err := plan.Commit(ctx); !errors.Is(err, artifact.ErrCommitted) {
		t.Fatalf("second commit: %v", err)
	}
	if _, err := (producers.MapRestorer{}).PlanRestore(ctx, lease, m); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("plan into a hydrated model: %v", err)
	}

	bad := producers.NewMapModel([]artifact.TensorSpec{{Name: "a", DType: "F16", Shape: []int64{4}}})
	if _, err := (producers.MapRestorer{}).PlanRestore(ctx, lease, bad); !errdefs.IsInvalidArgument(err) || bad.Hydration() != artifact.HydrationEmpty {
		t.Fatalf("mismatched plan: %v %s", err, bad.Hydration())
	}

	m = producers.NewMapModel(want)
	plan, _ = producers.MapRestorer{FailAfter: 1}.PlanRestore(ctx, lease, m)
	if err := plan.Commit(ctx); err == nil || m.Hydration() != artifact.HydrationPartial {
		t.Fatalf("failed commit: %v %s", err, m.Hydration())
	}
}

type fakeLease map[string][]byte

func (l fakeLease) Identity() artifact.Identity {
	return artifact.Identity{Producer: producers.TensorMapRef()}
}

func (l fakeLease) Tensor(name string) ([]byte, artifact.TensorEntry, error) {
	b, ok := l[name]
	if !ok {
		return nil, artifact.TensorEntry{}, errdefs.ErrNotFound
	}
	e := artifact.TensorEntry{Name: name, DType: "U8", Shape: []int64{int64(len(b))}}
	if name == "a" {
		e.DType, e.Shape = "F32", []int64{int64(len(b) / 4)}
	}
	return b, e, nil
}

func TestTensorMapProducer(t *testing.T) {
	p := &producers.TensorMap{Tensors: []artifact.WriteTensor{tensor("x", "BF16", 1, 3, 5)}}
	if p.Phase() != producers.PostLoadOnly {
		t.Fatal("tensor-map must be POST_LOAD_ONLY")
	}
	w := &storetest.MemWriter{}
	if err := p.Produce(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	raw, ok := w.Bytes("model.safetensors")
	if !ok {
		t.Fatal("not written")
	}
	_, got := readTensors(t, raw)
	if !bytes.Equal(got["x"], p.Tensors[0].Data) {
		t.Fatal("tensor differs")
	}
}
