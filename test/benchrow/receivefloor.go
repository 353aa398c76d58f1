package benchrow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
)

// Received is what ReceiveFloor measured: the layer bytes it read, the
// seconds it took and the CPU seconds (user and system) this process spent.
type Received struct {
	Bytes   int64
	Seconds float64
	CPU     float64
}

// ReceiveFloor is the network's floor for pulling the manifest at ref (a
// plain-HTTP registry on this host): every layer of it fetched and read
// into a buffer of 1 MiB and dropped, parallel at a time, nothing hashed
// or written. Its CPU is the whole process's, so nothing else in the
// process should run meanwhile.
func ReceiveFloor(ctx context.Context, ref string, parallel int) (Received, error) {
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return Received{}, err
	}
	repo.PlainHTTP = true
	_, raw, err := oras.FetchBytes(ctx, repo, ref, oras.DefaultFetchBytesOptions)
	if err != nil {
		return Received{}, fmt.Errorf("receive floor: manifest of %s: %w", ref, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Received{}, fmt.Errorf("receive floor: manifest of %s: %w", ref, err)
	}
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &before); err != nil {
		return Received{}, err
	}
	start := time.Now()
	var n atomic.Int64
	var g errgroup.Group
	g.SetLimit(max(1, parallel))
	for _, l := range m.Layers {
		g.Go(func() error {
			got, err := drain(ctx, repo, l)
			n.Add(got)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Received{}, fmt.Errorf("receive floor: %w", err)
	}
	secs := time.Since(start).Seconds()
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
		return Received{}, err
	}
	cpu := func(r unix.Rusage) float64 { return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e9 }
	return Received{Bytes: n.Load(), Seconds: secs, CPU: cpu(after) - cpu(before)}, nil
}

// drain reads the blob desc of repo, 1 MiB at a time as a pull does (not
// io.Discard's small buffers), until its end and returns the bytes read; a
// blob shorter or longer than desc says is an error.
func drain(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor) (int64, error) {
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := io.ReadFull(rc, buf)
		n += int64(k)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if n != desc.Size {
		return n, fmt.Errorf("blob %s: %d bytes, want %d", desc.Digest, n, desc.Size)
	}
	return n, nil
}
