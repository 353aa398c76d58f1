package staging_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/staging"
	"golang.org/x/sys/unix"
)

// Sparse-rows for 4 ranks: each output parses with our
// reader, holds exactly its rows (compared with the source), and allocates
// only its share of disk.
func TestSparseRowsFourRanks(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "128m")
	srcDir := t.TempDir()
	const rows, cols = 1003, 1024 // F32: 4 KiB rows, 1003 = 4*250 + 3 (uneven shares)
	embed := randBytes(9, rows*cols*4)
	other := randBytes(10, 2048*1024*4)
	var buf bytes.Buffer
	_, err := artifact.WriteSafetensors(&buf, []artifact.WriteTensor{
		{Name: "model.norm.weight", DType: "F32", Shape: []int64{2048, 1024}, Data: other},
		{Name: "model.embed_tokens.weight", DType: "F32", Shape: []int64{rows, cols}, Data: embed},
	}, map[string]string{"format": "pt"})
	must(t, err)
	src := filepath.Join(srcDir, "model-00001-of-00001.safetensors")
	must(t, os.WriteFile(src, buf.Bytes(), 0o644))
	srcHdr, err := artifact.ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	must(t, err)
	var table artifact.TensorInfo
	for _, ti := range srcHdr.Tensors {
		if ti.Name == "model.embed_tokens.weight" {
			table = ti
		}
	}

	next := int64(0)
	for rank := range 4 {
		dst := filepath.Join(dstFS, fmt.Sprintf("rank%d", rank))
		rc := recipe(t, fmt.Sprintf(`[[staging]]
id = "embed-r%d"
kind = "sparse-rows"
src = %q
dst = %q
tables = [{ name = "model.embed_tokens.weight", rows = "auto" }]
partition = "by-rank"
rank = %d
ranks = 4
emit_env = "EMBED"
mount = "/models/embed"
`, rank, srcDir, dst, rank))
		lr := stage(t, engine(t, t.TempDir(), staging.ModeAuto), rc).Lanes[0]
		share := int64(250)
		if rank < 3 {
			share++
		}
		first, end := next, next+share
		next = end
		wantEnv := []string{"EMBED=/models/embed", "EMBED_RANK=" + fmt.Sprint(rank), "EMBED_RANKS=4",
			fmt.Sprintf("EMBED_ROWS=model.embed_tokens.weight=%d:%d", first, end)}
		if !slices.Equal(lr.Env, wantEnv) || len(lr.Mounts) != 4 || lr.Mounts[1] != dst+":/models/embed:ro" {
			t.Fatalf("rank %d: env %q mounts %q", rank, lr.Env, lr.Mounts)
		}

		out := filepath.Join(dst, filepath.Base(src))
		got, err := os.ReadFile(out)
		must(t, err)
		if len(got) != buf.Len() {
			t.Fatalf("rank %d: apparent size %d, want the source's %d", rank, len(got), buf.Len())
		}
		hdr, err := artifact.ReadHeader(bytes.NewReader(got), int64(len(got)))
		if err != nil || !slices.EqualFunc(hdr.Tensors, srcHdr.Tensors, func(a, b artifact.TensorInfo) bool {
			return a.Name == b.Name && a.Begin == b.Begin && a.End == b.End && slices.Equal(a.Shape, b.Shape)
		}) {
			t.Fatalf("rank %d: the output does not parse as the source: %v", rank, err)
		}
		rowBytes := int64(cols * 4)
		lo := hdr.DataStart() + table.Begin + first*rowBytes
		hi := hdr.DataStart() + table.Begin + end*rowBytes
		if !bytes.Equal(got[lo:hi], buf.Bytes()[lo:hi]) {
			t.Fatalf("rank %d: rows %d:%d differ from the source", rank, first, end)
		}
		// Everything but the header and the rows is a hole (reads as zeros).
		for _, span := range [][2]int64{{hdr.DataStart(), lo}, {hi, int64(len(got))}} {
			if bytes.ContainsFunc(got[span[0]:span[1]], func(r rune) bool { return r != 0 }) {
				t.Fatalf("rank %d: data outside its rows", rank)
			}
		}
		var st unix.Stat_t
		must(t, unix.Stat(out, &st))
		allocated, mine := st.Blocks*512, hdr.DataStart()+hi-lo
		if allocated > mine+3*4096 || allocated < mine {
			t.Fatalf("rank %d: %d bytes allocated (du), want its share %d (apparent %d)", rank, allocated, mine, len(got))
		}
		t.Logf("rank %d: rows %d:%d, du %d KiB of apparent %d KiB", rank, first, end, allocated>>10, len(got)>>10)
	}
	if next != rows {
		t.Fatalf("the ranks staged %d rows, want %d", next, rows)
	}
}

// A re-run of a staged sparse lane checks the source and copies nothing; a
// changed row in the source's range re-stages the file.
func TestSparseRowsRerun(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "64m")
	srcDir := t.TempDir()
	var buf bytes.Buffer
	_, err := artifact.WriteSafetensors(&buf, []artifact.WriteTensor{
		{Name: "emb", DType: "BF16", Shape: []int64{4096, 512}, Data: randBytes(11, 4096*512*2)},
	}, nil)
	must(t, err)
	src := filepath.Join(srcDir, "model.safetensors")
	must(t, os.WriteFile(src, buf.Bytes(), 0o644))
	rc := recipe(t, fmt.Sprintf(`[[staging]]
id = "emb"
kind = "sparse-rows"
src = %q
dst = %q
verify = "sample-hash"
tables = [{ name = "emb", rows = "1024:3072" }]
rank = 1
ranks = 2
`, src, filepath.Join(dstFS, "emb")))
	e := engine(t, t.TempDir(), staging.ModeAuto)
	if lr := stage(t, e, rc).Lanes[0]; lr.Copied != 1 {
		t.Fatalf("first run: %+v", lr)
	}
	if lr := stage(t, e, rc).Lanes[0]; lr.Copied != 0 || lr.Unchanged != 1 {
		t.Fatalf("re-run: %+v", lr)
	}
	// Rank 1 of 2 of rows 1024:3072 is 2048:3072; change its first row.
	data := buf.Bytes()
	off := len(data) - 4096*512*2 + 2048*512*2 // the data start, then 2,048 rows of 1 KiB
	data[off] ^= 0xff
	must(t, os.WriteFile(src, data, 0o644))
	if lr := stage(t, e, rc).Lanes[0]; lr.Copied != 1 {
		t.Fatalf("after a change in the rows: %+v", lr)
	}
	got, _ := os.ReadFile(filepath.Join(dstFS, "emb", "model.safetensors"))
	if got[off] != data[off] {
		t.Fatal("the changed row was not re-staged")
	}
}
