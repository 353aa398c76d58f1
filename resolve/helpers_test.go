package resolve_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
)

var target = producers.Target{Repository: storetest.Repository, Revision: storetest.Revision}

func newRuntime(t testing.TB, cfg resolve.Config) *resolve.Runtime {
	t.Helper()
	if cfg.Mode == "" {
		cfg.Mode = resolve.Preferred
	}
	if cfg.Wait.CoordinationTimeoutSeconds == 0 {
		cfg.Wait.CoordinationTimeoutSeconds = 30
	}
	r, err := resolve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// identityOf derives a local producer's identity for a source directory.
func identityOf(t testing.TB, r producers.Local, dir string) artifact.Identity {
	t.Helper()
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.Identity(src, target)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// sourceTensors reads every tensor of a checkpoint directory.
func sourceTensors(t testing.TB, dir string) map[string]artifact.WriteTensor {
	t.Helper()
	out := map[string]artifact.WriteTensor{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, p := range files {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := artifact.ReadHeader(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range h.Tensors {
			out[ti.Name] = artifact.WriteTensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape,
				Data: raw[h.DataStart()+ti.Begin : h.DataStart()+ti.End]}
		}
	}
	return out
}

// spyLocal counts the calls into a local producer.
type spyLocal struct {
	producers.Local
	calls *atomic.Int32
}

func spy(r producers.Local) (spyLocal, *atomic.Int32) {
	n := &atomic.Int32{}
	return spyLocal{Local: r, calls: n}, n
}

func (s spyLocal) Identity(src *artifact.SourceDir, t producers.Target) (artifact.Identity, error) {
	s.calls.Add(1)
	return s.Local.Identity(src, t)
}

func (s spyLocal) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	s.calls.Add(1)
	return s.Local.Producer(src)
}

// testLocal is a local producer with a given Produce function.
type testLocal struct {
	name    string
	phase   producers.Phase
	produce func(ctx context.Context, w artifact.Writer) error
}

func (r *testLocal) Name() string           { return r.name }
func (r *testLocal) Phase() producers.Phase { return r.phase }
func (r *testLocal) Ref() artifact.ProducerRef {
	return artifact.ProducerRef{Name: r.name, Version: "1", Fingerprint: "test:" + r.name, ManifestSchema: 1, RestorerSchema: 1}
}

func (r *testLocal) Identity(src *artifact.SourceDir, t producers.Target) (artifact.Identity, error) {
	id := artifact.Identity{Schema: artifact.IdentitySchema,
		Model:     artifact.Model{Repository: t.Repository, Revision: t.Revision, Source: src.Files},
		Component: "all", Representation: artifact.Representation{DType: "source"},
		Layout: artifact.Layout{Name: "source"}, Producer: r.Ref()}
	return id, id.Validate()
}

func (r *testLocal) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	return artifact.ProducerFunc{ProducerName: r.name, Fn: r.produce}, nil
}

// retryErr is a transient remote failure.
type retryErr struct{}

func (retryErr) Error() string   { return "connection reset by peer" }
func (retryErr) Retryable() bool { return true }

// failProvider is a provider that fails with err, counting its calls.
func failProvider(name string, err error, calls *atomic.Int32) resolve.Provider {
	return resolve.ProviderFunc{ProviderName: name, Fn: func(context.Context, artifact.Identity) (artifact.Producer, error) {
		calls.Add(1)
		return nil, err
	}}
}

func mustNotExist(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s exists (or cannot be checked: %v)", p, err)
	}
}

func sleepCtx(ctx context.Context, ms int) error {
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
