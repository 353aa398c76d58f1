package staging

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// rangeSpec is one table's row range in a source file.
type rangeSpec struct {
	table  string
	rows   [2]int64 // [first, end)
	off, n int64    // file offset and length
}

// sparseWalk finds a sparse-rows lane's tables in its source (a
// safetensors file, or a folder of them) and the rows this node stages;
// item paths are relative to root.
func sparseWalk(ctx context.Context, b *Block) (root string, items []item, err error) {
	root, files, err := safetensorsFiles(b.Src)
	if err != nil {
		return "", nil, fmt.Errorf("lane %s: %w", b.ID, err)
	}
	want := make(map[string]Table, len(b.Tables))
	for _, t := range b.Tables {
		want[t.Name] = t
	}
	found := map[string]string{}
	for _, rel := range files {
		if err := ctx.Err(); err != nil {
			return "", nil, err
		}
		it, err := sparseItem(b, root, rel, want, found)
		if err != nil {
			return "", nil, err
		}
		if len(it.ranges) > 0 {
			items = append(items, it)
		}
	}
	for _, t := range b.Tables {
		if _, ok := found[t.Name]; !ok {
			return "", nil, fmt.Errorf("lane %s: table %q is in no safetensors file of %s: %w", b.ID, t.Name, b.Src, errdefs.ErrNotFound)
		}
	}
	return root, items, nil
}

// safetensorsFiles lists the safetensors files of src (a file or a folder,
// hidden entries left out) relative to the returned root.
func safetensorsFiles(src string) (string, []string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", nil, err
	}
	if !fi.IsDir() {
		return filepath.Dir(src), []string{filepath.Base(src)}, nil
	}
	var files []string
	err = filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != src && strings.HasPrefix(de.Name(), ".") {
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !de.IsDir() && strings.HasSuffix(de.Name(), ".safetensors") {
			rel, _ := filepath.Rel(src, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return src, files, err
}

// sparseItem reads one file's header and derives the ranges of the tables
// it holds.
func sparseItem(b *Block, root, rel string, want map[string]Table, found map[string]string) (item, error) {
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return item{}, fmt.Errorf("lane %s: %w", b.ID, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return item{}, fmt.Errorf("lane %s: %w", b.ID, err)
	}
	h, err := artifact.ReadHeader(f, fi.Size())
	if err != nil {
		return item{}, fmt.Errorf("lane %s: %s: %w", b.ID, rel, err)
	}
	it := item{kind: EntrySparse, path: rel, size: fi.Size(), mode: fi.Mode(), header: h.DataStart()}
	for _, ti := range h.Tensors {
		t, ok := want[ti.Name]
		if !ok {
			continue
		}
		if other, dup := found[ti.Name]; dup {
			return item{}, fmt.Errorf("lane %s: table %q is in both %s and %s: %w", b.ID, ti.Name, other, rel, errdefs.ErrInvalidArgument)
		}
		found[ti.Name] = rel
		r, err := tableRange(b, t, ti, h.DataStart())
		if err != nil {
			return item{}, fmt.Errorf("lane %s: %s: %w", b.ID, rel, err)
		}
		it.ranges = append(it.ranges, r)
	}
	sort.Slice(it.ranges, func(i, j int) bool { return it.ranges[i].off < it.ranges[j].off })
	return it, nil
}

// tableRange is the byte range of the rows of table t this node stages.
// Rank r of N gets a contiguous share of the selected rows; the first
// rows%N ranks get one row more.
func tableRange(b *Block, t Table, ti artifact.TensorInfo, dataStart int64) (rangeSpec, error) {
	if len(ti.Shape) == 0 {
		return rangeSpec{}, fmt.Errorf("table %q is a scalar, it has no rows: %w", t.Name, errdefs.ErrInvalidArgument)
	}
	dt, _ := artifact.LookupDType(ti.DType) // the header was validated
	rowBytes, ok := dt.TensorBytes(ti.Shape[1:])
	rows := ti.Shape[0]
	if !ok || rowBytes*rows != ti.End-ti.Begin {
		return rangeSpec{}, fmt.Errorf("table %q: a row of %s %v is not a whole number of bytes: %w", t.Name, ti.DType, ti.Shape[1:], errdefs.ErrInvalidArgument)
	}
	first, end := int64(0), rows
	if !t.Rows.Auto {
		if t.Rows.End > rows {
			return rangeSpec{}, fmt.Errorf("table %q has %d rows, rows = %q asks for more: %w", t.Name, rows, t.Rows, errdefs.ErrInvalidArgument)
		}
		first, end = t.Rows.Start, t.Rows.End
	}
	if b.Partition == PartitionByRank {
		n, ranks, rank := end-first, *b.Ranks, *b.Rank
		base, extra := n/ranks, n%ranks
		first += rank*base + min(rank, extra)
		end = first + base
		if rank < extra {
			end++
		}
	}
	return rangeSpec{table: t.Name, rows: [2]int64{first, end}, off: dataStart + ti.Begin + first*rowBytes, n: (end - first) * rowBytes}, nil
}

// sparseSample is the sampled hash of a sparse-rows file's content: its
// size, its header whole, and each range sampled.
func sparseSample(ctx context.Context, f *os.File, it item) (string, error) {
	h := blake3.New()
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(it.size))
	h.Write(le[:])
	if err := hashRange(ctx, f, 0, it.header, h); err != nil {
		return "", err
	}
	for _, r := range it.ranges {
		s, err := sampleHash(f, r.off, r.n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// stageSparse writes the header and this node's rows of one source file at
// their offsets into a sparse file of the source's size, verifies them and
// renames it into place. The source's pages are dropped as they are read.
func (r *laneRun) stageSparse(ctx context.Context, it item, src, dst string) (Entry, error) {
	in, err := os.Open(src)
	if err != nil {
		return Entry{}, err
	}
	defer in.Close()
	if err := sameSize(in, it); err != nil {
		return Entry{}, err
	}
	srcSample, err := sparseSample(ctx, in, it)
	if err != nil {
		return Entry{}, err
	}
	tmp := dst + tmpSuffix
	out, err := createTemp(tmp, it.size, it.mode, true)
	if err != nil {
		return Entry{}, err
	}
	defer out.Close()
	fail := func(err error) (Entry, error) {
		out.Close()
		os.Remove(tmp)
		return Entry{}, err
	}
	if err := copyRange(ctx, in, out, 0, it.header, nil, r.progress); err != nil {
		return fail(err)
	}
	e := Entry{Path: it.path, Kind: EntrySparse, Size: it.size, Verify: r.b.Verify}
	for _, rs := range it.ranges {
		var h *blake3.Hasher
		if r.b.Verify == VerifyFull {
			h = blake3.New()
		}
		if err := copyRange(ctx, in, out, rs.off, rs.n, writerOrNil(h), r.progress); err != nil {
			return fail(err)
		}
		dropCache(in, rs.off, rs.n)
		rec := RangeRecord{Table: rs.table, Rows: rs.rows, Offset: rs.off, Length: rs.n}
		if h != nil {
			rec.Digest = "blake3:" + hex.EncodeToString(h.Sum(nil))
			back := blake3.New()
			if err := hashRange(ctx, out, rs.off, rs.n, back); err != nil {
				return fail(err)
			}
			if got := "blake3:" + hex.EncodeToString(back.Sum(nil)); got != rec.Digest {
				return fail(mismatch(r.b.ID, "", src, "rows of "+rs.table, rec.Digest, got))
			}
		}
		e.Ranges = append(e.Ranges, rec)
	}
	if _, err := artifact.ReadHeader(out, it.size); err != nil {
		return fail(fmt.Errorf("lane %s: staged %s does not parse: %w", r.b.ID, it.path, err))
	}
	if e.Sample, err = sparseSample(ctx, out, it); err != nil {
		return fail(err)
	}
	if e.Sample != srcSample {
		return fail(mismatch(r.b.ID, "", src, "sampled header and rows", srcSample, e.Sample))
	}
	if err := sameSize(in, it); err != nil {
		return fail(err)
	}
	return r.install(e, out, tmp, dst, in)
}

// writerOrNil keeps a nil hasher a nil io.Writer.
func writerOrNil(h *blake3.Hasher) io.Writer {
	if h == nil {
		return nil
	}
	return h
}

// sameSize checks an open source still has the size the plan listed.
func sameSize(f *os.File, it item) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != it.size {
		return errChanged(f.Name(), "size %d, listed as %d", fi.Size(), it.size)
	}
	return nil
}
