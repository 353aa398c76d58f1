package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// hashCheck is what verifyHashes recomputes beyond the BLAKE3 of every byte.
type hashCheck struct {
	sha256 bool  // every file's sha256 too (the scrub)
	pace   pacer // paces the bytes read, over all workers; nil is unthrottled
}

// pacer paces reads: WaitN returns once n more bytes may be read
// (*rate.Limiter).
type pacer interface {
	WaitN(ctx context.Context, n int) error
}

// verifyChunk is how much of a file one hasher reads and hashes at a time:
// small enough that its buffer stays in the core's cache between the copy
// and the hash. verify reads rather than hashing through the artifact's
// mapping: on this project's virtual machines hashing a mapped 512 MiB file
// cost 0.96-1.18 CPU-s/GiB, read in 1 MiB pieces 0.35-0.41 (each page of a
// mapping is touched once, and there a first touch costs far more than a
// copy into a buffer the core already holds); a read error is also an
// error, where a mapping would fault.
const verifyChunk = 1 << 20

// verifyHashes recomputes the digests of every payload byte of artifact id
// and compares them with the index, in parallel: the BLAKE3 of the header
// region and of each tensor of a safetensors file (in schema 2 the file's
// BLAKE3 is their tree, checked when the index was decoded), the whole-file
// BLAKE3 of any other file, and with c.sha256 every file's sha256. Each byte
// is read once: with c.sha256 one task reads a whole file and feeds its
// sha256 and its regions' BLAKE3 from the same buffer; without, each region
// is a task of its own. Each worker reads through one buffer of verifyChunk
// bytes, so a full check of any size holds one buffer per worker in memory.
// It returns an *InvalidError for bytes that disagree, a storage failure
// (errdefs.ErrUnavailable) for a read the store failed.
func verifyHashes(ctx context.Context, id artifact.ID, files []*LeaseFile, c hashCheck) error {
	b3 := func() hash.Hash { return blake3.New() }
	var tasks []hashTask
	for _, lf := range files {
		e := lf.Entry
		var regions []digestCheck
		if len(e.Tensors) == 0 && e.DataStart == 0 {
			regions = append(regions, digestCheck{"", "BLAKE3", 0, e.Size, e.BLAKE3, b3()})
		} else {
			regions = append(regions, digestCheck{"", "BLAKE3", 0, e.DataStart, e.HeaderBLAKE3, b3()})
			for _, t := range e.Tensors {
				regions = append(regions, digestCheck{t.Name, "BLAKE3", t.Offset, t.Length, t.BLAKE3, b3()})
			}
		}
		if !c.sha256 {
			for _, r := range regions {
				tasks = append(tasks, hashTask{e.Path, lf.File, r.off, r.n, []digestCheck{r}})
			}
			continue
		}
		sum := digestCheck{"", "sha256", 0, e.Size, e.SHA256, sha256.New()}
		tasks = append(tasks, hashTask{e.Path, lf.File, 0, e.Size, append(regions, sum)})
	}
	// Largest first, so the longest hashes start early.
	slices.SortStableFunc(tasks, func(a, b hashTask) int { return cmp.Compare(b.n, a.n) })
	work := make(chan hashTask)
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
			buf := make([]byte, verifyChunk)
			for t := range work {
				if err := t.check(ctx, id, buf, c.pace); err != nil {
					fail(err)
				}
			}
		})
	}
feed:
	for _, t := range tasks {
		select {
		case work <- t:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// hashTask is one read verifyHashes makes: n bytes of f from off, which
// feed the digests of the regions they cover.
type hashTask struct {
	file    string
	f       *os.File
	off, n  int64
	digests []digestCheck // in the order they are compared
}

// digestCheck is one recorded digest of n bytes of a file from off.
type digestCheck struct {
	tensor, what string
	off, n       int64
	want         string
	h            hash.Hash
}

// check reads the task's bytes once through buf at the pace of pace (nil:
// unthrottled), feeds each digest the part of them it covers, and compares
// the digests. A read the store failed is a storage failure
// (errdefs.ErrUnavailable), bytes that disagree or cannot be read an
// *InvalidError, a cancelled or throttled-out check the context's error.
func (t hashTask) check(ctx context.Context, id artifact.ID, buf []byte, pace pacer) error {
	for off, end := t.off, t.off+t.n; off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(int64(len(buf)), end-off)]
		if pace != nil {
			if err := pace.WaitN(ctx, len(b)); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%w: %w", context.DeadlineExceeded, err) // the rate cannot finish before the deadline
			}
		}
		if _, err := t.f.ReadAt(b, off); err != nil {
			return readFailure(id, t.file, fmt.Errorf("read %d bytes at %d: %w", len(b), off, err))
		}
		for _, d := range t.digests {
			from, to := max(d.off, off), min(d.off+d.n, off+int64(len(b)))
			if from < to {
				d.h.Write(b[from-off : to-off])
			}
		}
		off += int64(len(b))
	}
	for _, d := range t.digests {
		if hex.EncodeToString(d.h.Sum(nil)) != d.want {
			return &InvalidError{ID: id, File: t.file, Tensor: d.tensor, Reason: d.what + " mismatch: the bytes changed"}
		}
	}
	return nil
}

// ScrubOptions tune a scrub.
type ScrubOptions struct {
	// Rate is the most bytes per second the scrub reads; 0 is unthrottled.
	Rate int64
}

// Scrub checks every digest an artifact records against its bytes, at a bounded rate.
// It recomputes the BLAKE3 of every region, the tree, and every file's sha256.
// It denies the artifact if any disagrees, as a full lookup would.
// It holds the shared artifact lock meanwhile and leases nothing.
func (d *Domain) Scrub(ctx context.Context, id artifact.ID, o ScrubOptions) error {
	if id.IsZero() {
		return fmt.Errorf("no artifact id: %w", errdefs.ErrInvalidArgument)
	}
	if err := d.checkDenied(id); err != nil {
		return err
	}
	deadline := time.Now().Add(d.policy.CoordinationTimeout())
	lk, err := lockFile(ctx, d.lockPath(id, "artifact"), unix.LOCK_SH, deadline, "the artifact lock of "+id.Short())
	if err != nil {
		return err
	}
	op, err := d.validateDir(ctx, id, ManifestAndMetadata)
	if err == nil {
		c := hashCheck{sha256: true}
		if o.Rate > 0 {
			c.pace = rate.NewLimiter(rate.Limit(o.Rate), verifyChunk)
		}
		err = verifyHashes(ctx, id, op.files, c)
		op.close()
	}
	var ie *InvalidError
	if errors.As(err, &ie) {
		return d.invalidate(ctx, id, ie.with(id), lk)
	}
	lk.Close()
	return err
}
