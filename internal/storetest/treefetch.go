package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
	"github.com/zeebo/blake3"
)

// TreeFetch is a producer that writes the files of a leased artifact the
// way a peer fetch does: every file created with BindTree from the sender's
// entry, every part written by WriteAt from its own goroutine, last part
// first, and its BLAKE3 reported; corrupt names a part reported wrongly,
// lieSHA a file whose sha256 the sender's entry gets wrong; checkSHA binds
// every file with CheckSHA256.
func TreeFetch(l *store.Lease, corrupt, lieSHA string, checkSHA bool) artifact.Producer {
	return artifact.ProducerFunc{ProducerName: "tree-fetch", Fn: func(ctx context.Context, w artifact.Writer) error {
		for _, lf := range l.Files() {
			e := lf.Entry
			data, err := lf.Data()
			if err != nil {
				return err
			}
			if e.Path == lieSHA {
				e.SHA256 = strings.Repeat("5", 64)
			}
			fw, err := w.CreateBound(artifact.Binding{Want: e, By: artifact.BindTree, CheckSHA256: checkSHA})
			if err != nil {
				return err
			}
			type part struct {
				name     string
				off, end int64
			}
			parts := []part{{"", 0, e.Size}}
			if artifact.IsSafetensors(e.Path) {
				parts = []part{{"", 0, e.DataStart}} // the header: written, not reported
				for _, t := range e.Tensors {
					parts = append(parts, part{t.Name, t.Offset, t.Offset + t.Length})
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(parts))
			for i := len(parts) - 1; i >= 0; i-- {
				wg.Go(func() {
					p := parts[i]
					if _, errs[i] = fw.WriteAt(data[p.off:p.end], p.off); errs[i] != nil || (i == 0 && artifact.IsSafetensors(e.Path)) {
						return
					}
					sum := blake3.Sum256(data[p.off:p.end])
					if p.name == corrupt && corrupt != "" {
						sum[0] ^= 1
					}
					idx := i
					if artifact.IsSafetensors(e.Path) {
						idx = i - 1
					}
					errs[i] = fw.SetPartBLAKE3(idx, sum)
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if err := fw.Close(); err != nil {
				return err
			}
		}
		return nil
	}}
}
