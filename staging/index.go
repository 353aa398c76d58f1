package staging

import (
	"path/filepath"
	"sync"
)

// contentIndex lists the staged blobs of every lane on this node by size,
// so a blob about to be copied can be hardlinked to identical content
// instead. Only blobs: they are immutable, named by their content, while a
// hub client rewrites refs in place (a hardlinked ref would change two). Entries are hints: a candidate is used only while its stat
// matches its entry, and only after a full compare.
type contentIndex struct {
	mu     sync.Mutex
	bySize map[int64][]indexed
}

type indexed struct {
	path string // absolute
	e    Entry
}

func newContentIndex(ledgers []*Ledger) *contentIndex {
	x := &contentIndex{bySize: map[int64][]indexed{}}
	for _, l := range ledgers {
		if l.State == StateEvicted {
			continue
		}
		for _, e := range l.Entries {
			if e.Kind == EntryBlob {
				x.add(filepath.Join(l.Dst, filepath.FromSlash(e.Path)), e)
			}
		}
	}
	return x
}

// add lists a staged blob (one with content and a sample).
func (x *contentIndex) add(p string, e Entry) {
	if e.Size == 0 || e.Sample == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bySize[e.Size] = append(x.bySize[e.Size], indexed{path: p, e: e})
}

// lookup lists the staged files of a size on a filesystem, latest first.
func (x *contentIndex) lookup(size int64, dev uint64) []indexed {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []indexed
	all := x.bySize[size]
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].e.Dev == dev {
			out = append(out, all[i])
		}
	}
	return out
}
