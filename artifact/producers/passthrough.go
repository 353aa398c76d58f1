package producers

import (
	"context"
	"sync/atomic"

	"github.com/weightsnap/weightsnap/artifact"
)

// Passthrough is the Local of artifact.Passthrough: the source directory as it is.
type Passthrough struct{}

// Name implements Local.
func (Passthrough) Name() string { return artifact.PassthroughName }

// Phase implements Local.
func (Passthrough) Phase() Phase { return PreLoadSafe }

// Ref implements Local.
func (Passthrough) Ref() artifact.ProducerRef { return artifact.PassthroughRef() }

// Identity implements Local: artifact.PassthroughIdentity, untiled.
func (Passthrough) Identity(src *artifact.SourceDir, t Target) (artifact.Identity, error) {
	id := artifact.PassthroughIdentity(src, t.Repository, t.Revision, component(t.Component), 0, 0)
	return id, id.Validate()
}

// Producer implements Local.
func (Passthrough) Producer(src *artifact.SourceDir) (artifact.Producer, error) {
	p := &passthrough{}
	p.inner = &artifact.Passthrough{Src: src, Progress: func(n int64) { p.read.Add(n) }}
	return p, nil
}

// passthrough counts the source bytes artifact.Passthrough reads.
type passthrough struct {
	inner *artifact.Passthrough
	read  atomic.Int64
}

func (p *passthrough) Name() string { return p.inner.Name() }

func (p *passthrough) Produce(ctx context.Context, w artifact.Writer) error {
	return p.inner.Produce(ctx, w)
}

func (p *passthrough) SourceBytesRead() int64 { return p.read.Load() }

// Progress implements artifact.ProgressReporter.
func (p *passthrough) Progress() (done, total int64) { return p.read.Load(), p.inner.Src.TotalBytes() }
