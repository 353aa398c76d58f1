package staging

import (
	"path/filepath"
	"sync"
)

// contentIndex lists the staged blobs of every lane on this node by size,
// so a blob about to be copied can be hardlinked to identical content
// instead. Only blobs: they are immutable, named by their content, while a
// hub client rewrites refs in place (a hardlinked ref would change two). Entries are hints: a candidate is used only while its stat
// matches its entry, and only after a full compare. The ledgers are read
// at the first lookup: a run that copies nothing never reads them.
type contentIndex struct {
	load func() ([]*Ledger, error)

	mu     sync.Mutex
	loaded bool
	err    error
	bySize map[int64][]indexed
	added  []indexed // staged by this run before the first lookup
}

type indexed struct {
	path string // absolute
	e    Entry
}

func newContentIndex(load func() ([]*Ledger, error)) *contentIndex {
	return &contentIndex{load: load, bySize: map[int64][]indexed{}}
}

// add lists a staged blob (one with content and a sample).
func (x *contentIndex) add(p string, e Entry) {
	if e.Size == 0 || e.Sample == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.loaded {
		x.added = append(x.added, indexed{path: p, e: e})
		return
	}
	x.bySize[e.Size] = append(x.bySize[e.Size], indexed{path: p, e: e})
}

// lookup lists the staged files of a size on a filesystem, latest first.
func (x *contentIndex) lookup(size int64, dev uint64) ([]indexed, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.loaded {
		x.fillLocked()
	}
	if x.err != nil {
		return nil, x.err
	}
	var out []indexed
	all := x.bySize[size]
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].e.Dev == dev {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// fillLocked lists the blobs of every ledger, then those this run added.
func (x *contentIndex) fillLocked() {
	x.loaded = true
	ledgers, err := x.load()
	if err != nil {
		x.err = err
		return
	}
	for _, l := range ledgers {
		if l.State == StateEvicted {
			continue
		}
		for _, e := range l.Entries {
			if e.Kind == EntryBlob && e.Size != 0 && e.Sample != "" {
				p := filepath.Join(l.Dst, filepath.FromSlash(e.Path))
				x.bySize[e.Size] = append(x.bySize[e.Size], indexed{path: p, e: e})
			}
		}
	}
	for _, a := range x.added {
		x.bySize[a.e.Size] = append(x.bySize[a.e.Size], a)
	}
	x.added = nil
}
