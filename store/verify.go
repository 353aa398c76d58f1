package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"golang.org/x/sys/unix"
)

// hashCheck is what verifyHashes recomputes beyond the BLAKE3 of every byte.
type hashCheck struct {
	sha256 bool  // every file's sha256 too (the scrub)
	rate   int64 // bytes per second over all workers; 0 is unthrottled
}

// verifyChunk is how much of a mapping is hashed between page-table drops.
const verifyChunk = 8 << 20

// verifyHashes recomputes the digests of every payload byte and compares
// them with the index, in parallel: the BLAKE3 of the header region and of
// each tensor of a safetensors file (in schema 2 the file's BLAKE3 is their
// tree, checked when the index was decoded), the whole-file BLAKE3 of any
// other file, and with c.sha256 every file's sha256. Each region is hashed
// from the mapping a chunk at a time, and the chunk's pages are dropped
// from this process's page tables once hashed, so a full check of any size
// stays within a few chunks of resident memory.
func verifyHashes(ctx context.Context, files []*LeaseFile, c hashCheck) error {
	type task struct {
		file, tensor, what string
		data               []byte
		want               string
		newHash            func() hash.Hash
	}
	b3 := func() hash.Hash { return blake3.New() }
	var tasks []task
	for _, lf := range files {
		e := lf.Entry
		if c.sha256 {
			tasks = append(tasks, task{e.Path, "", "sha256", lf.Data, e.SHA256, sha256.New})
		}
		if len(e.Tensors) == 0 && e.DataStart == 0 {
			tasks = append(tasks, task{e.Path, "", "BLAKE3", lf.Data, e.BLAKE3, b3})
			continue
		}
		tasks = append(tasks, task{e.Path, "", "BLAKE3", lf.Data[:e.DataStart], e.HeaderBLAKE3, b3})
		for _, t := range e.Tensors {
			tasks = append(tasks, task{e.Path, t.Name, "BLAKE3", lf.Data[t.Offset : t.Offset+t.Length], t.BLAKE3, b3})
		}
	}
	// Largest first, so the longest hashes start early.
	slices.SortStableFunc(tasks, func(a, b task) int { return len(b.data) - len(a.data) })
	pace := newPacer(c.rate)
	work := make(chan task)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for t := range work {
				h := t.newHash()
				if err := hashMapped(ctx, h, t.data, pace); err != nil {
					fail(err)
					continue
				}
				if hex.EncodeToString(h.Sum(nil)) != t.want {
					fail(&InvalidError{File: t.file, Tensor: t.tensor, Reason: t.what + " mismatch: the bytes changed"})
				}
			}
		})
	}
	for _, t := range tasks {
		work <- t
	}
	close(work)
	wg.Wait()
	return first
}

// hashMapped hashes a region of a mapping a chunk at a time: each chunk is
// faulted in with one call, hashed, and dropped from the page tables (the
// page cache keeps it; a later read of the mapping faults it back).
func hashMapped(ctx context.Context, h hash.Hash, data []byte, pace *pacer) error {
	page := unix.Getpagesize()
	for off := 0; off < len(data); off += verifyChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := data[off:min(off+verifyChunk, len(data))]
		if err := pace.wait(ctx, len(chunk)); err != nil {
			return err
		}
		whole := pageSpan(chunk, page)
		if whole != nil {
			unix.Madvise(whole, unix.MADV_POPULATE_READ) // a hint: faults in the chunk at once where the kernel can
		}
		h.Write(chunk)
		if whole != nil {
			unix.Madvise(whole, unix.MADV_DONTNEED)
		}
	}
	return nil
}

// pageSpan is the largest page-aligned part of b, or nil.
func pageSpan(b []byte, page int) []byte {
	if len(b) == 0 {
		return nil
	}
	start := int(uintptr(unsafe.Pointer(&b[0])) % uintptr(page))
	if start != 0 {
		start = page - start
	}
	end := start + (len(b)-start)/page*page
	if start >= len(b) || end <= start {
		return nil
	}
	return b[start:end]
}

// pacer spreads work over time at a rate in bytes per second; a nil pacer
// never waits.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func newPacer(rate int64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{rate: float64(rate)}
}

// wait returns once n more bytes fit the rate.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	d := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ScrubOptions tune a scrub.
type ScrubOptions struct {
	// Rate is the most bytes per second the scrub reads; 0 is unthrottled.
	Rate int64
}

// Scrub recomputes every digest an artifact records from its bytes (the
// BLAKE3 of every region, the tree, and every file's sha256) at a bounded
// rate, and denies the artifact if any disagrees, as a full lookup would.
// It holds the shared artifact lock meanwhile and leases nothing.
func (d *Domain) Scrub(ctx context.Context, id string, o ScrubOptions) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("artifact id %q is not 64 hex digits: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := d.checkDenied(id); err != nil {
		return err
	}
	deadline := time.Now().Add(d.policy.CoordinationTimeout())
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_SH, deadline, "the artifact lock of "+short(id))
	if err != nil {
		return err
	}
	op, err := d.validateDir(id, ManifestAndMetadata)
	if err == nil {
		err = verifyHashes(ctx, op.files, hashCheck{sha256: true, rate: o.Rate})
		op.close()
	}
	var ie *InvalidError
	if errors.As(err, &ie) {
		return d.invalidate(ctx, id, ie.with(id), lk)
	}
	lk.Close()
	return err
}
