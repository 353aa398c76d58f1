package benchrow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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
	layers := make(chan ocispec.Descriptor, len(m.Layers))
	for _, l := range m.Layers {
		layers <- l
	}
	close(layers)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		n    int64
		errs []error
	)
	for range max(1, parallel) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for l := range layers {
				got, err := drain(ctx, repo, l, buf)
				mu.Lock()
				n += got
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return Received{}, fmt.Errorf("receive floor: %w", err)
	}
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
		return Received{}, err
	}
	cpu := func(r unix.Rusage) float64 { return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e9 }
	return Received{Bytes: n, Seconds: secs, CPU: cpu(after) - cpu(before)}, nil
}

// drain reads the blob desc of repo into buf until its end and returns the
// bytes read; a blob shorter or longer than desc says is an error.
func drain(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, buf []byte) (int64, error) {
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
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
