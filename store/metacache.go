package store

import (
	"sync"

	"github.com/weightsnap/weightsnap/artifact"
)

// metaCacheEntries bounds the decoded metadata a domain keeps: one entry
// per artifact recently looked up.
const metaCacheEntries = 32

// metaCache keeps the decoded and cross-checked manifest and index of the
// artifacts recently looked up, keyed by the sha256 of the bytes they were
// decoded from. A lookup still reads both files and checks their sha256
// against READY.json; only when those bytes are the very bytes an earlier
// lookup decoded does it take that decoding (a function of the bytes
// alone) instead of parsing them again. The values are shared by every
// lease of the artifact: read-only.
type metaCache struct {
	mu      sync.Mutex
	entries map[metaKey]decodedMeta
	order   []metaKey // oldest first
}

type metaKey struct{ manifestSHA256, indexSHA256 string }

type decodedMeta struct {
	manifest   *Manifest
	index      *artifact.Index
	indexBound int64 // the most bytes the manifest's index may have (artifact.IndexBound)
}

func newMetaCache() *metaCache { return &metaCache{entries: map[metaKey]decodedMeta{}} }

func (c *metaCache) get(k metaKey) (decodedMeta, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.entries[k]
	return m, ok
}

func (c *metaCache) put(k metaKey, m decodedMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; ok {
		return
	}
	if len(c.order) == metaCacheEntries {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
	c.entries[k] = m
	c.order = append(c.order, k)
}
