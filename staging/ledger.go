package staging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// LedgerSchema is the version of the ledger encoding.
const LedgerSchema = 1

// Lane states.
const (
	StateStaging = "staging" // a run is in progress or crashed: entries are what it verified
	StateStaged  = "staged"  // every file verified
	StateFailed  = "failed"  // the last run failed: entries are what it verified
	StateEvicted = "evicted" // the staged data was removed
)

// Entry kinds.
const (
	EntryBlob   = "blob"   // a hub blob, named by its hash
	EntryFile   = "file"   // a regular file copied as it is (refs, markers)
	EntryLink   = "link"   // a symbolic link
	EntrySparse = "sparse" // a sparse-rows file
)

// Entry is one staged file of a lane.
type Entry struct {
	Path   string `json:"path"` // relative to the lane's dst (and src, for hub-mirror)
	Kind   string `json:"kind"`
	Size   int64  `json:"size,omitempty"`
	Target string `json:"target,omitempty"` // a link's target
	// Digest is the full hash verified against the blob's name
	// ("sha256:<hex>", "gitsha1:<hex>"), or the BLAKE3 of a file compared
	// whole ("blake3:<hex>"); empty when only sampled.
	Digest string `json:"digest,omitempty"`
	// Sample is the sampled hash of the content (sampleHash); for a sparse
	// file, of its header and row ranges.
	Sample string        `json:"sample,omitempty"`
	Verify Verify        `json:"verify,omitempty"`
	Ranges []RangeRecord `json:"ranges,omitempty"`
	// The staged file as stat'ed after it was verified: it is unchanged
	// while these match (the destination's clock is ours; link counts and
	// ctime change when other lanes hardlink it).
	Dev     uint64 `json:"dev,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	MtimeNs int64  `json:"mtime_ns,omitempty"`
}

// RangeRecord is one table's row range in a sparse-rows file.
type RangeRecord struct {
	Table  string   `json:"table"`
	Rows   [2]int64 `json:"rows"`   // [first, end)
	Offset int64    `json:"offset"` // file offset of the first byte
	Length int64    `json:"length"`
	Digest string   `json:"digest,omitempty"` // "blake3:<hex>" in full mode
}

// Ledger is what one lane staged on one node.
type Ledger struct {
	Schema   int       `json:"schema"`
	ID       string    `json:"id"`
	Node     string    `json:"node"`
	Kind     string    `json:"kind"`
	Src      string    `json:"src"`
	Dst      string    `json:"dst"`
	Verify   Verify    `json:"verify"`
	State    string    `json:"state"`
	Error    string    `json:"error,omitempty"`
	StagedAt time.Time `json:"staged_at,omitzero"`
	LastUsed time.Time `json:"last_used,omitzero"`
	Bytes    int64     `json:"bytes"`
	Entries  []Entry   `json:"entries"`
}

// Entry returns the entry with the given path.
func (l *Ledger) Entry(p string) (Entry, bool) {
	i := sort.Search(len(l.Entries), func(i int) bool { return l.Entries[i].Path >= p })
	if i < len(l.Entries) && l.Entries[i].Path == p {
		return l.Entries[i], true
	}
	return Entry{}, false
}

// files counts the entries that are files (not links).
func (l *Ledger) files() int {
	n := 0
	for _, e := range l.Entries {
		if e.Kind != EntryLink {
			n++
		}
	}
	return n
}

// set adds or replaces entries, keeping them sorted by path.
func (l *Ledger) set(es ...Entry) {
	byPath := make(map[string]Entry, len(l.Entries)+len(es))
	for _, e := range l.Entries {
		byPath[e.Path] = e
	}
	for _, e := range es {
		byPath[e.Path] = e
	}
	l.Entries = make([]Entry, 0, len(byPath)) // never the old array: plans and indexes keep slices of it
	for _, e := range byPath {
		l.Entries = append(l.Entries, e)
	}
	sort.Slice(l.Entries, func(i, j int) bool { return l.Entries[i].Path < l.Entries[j].Path })
	l.Bytes = 0
	for _, e := range l.Entries {
		l.Bytes += e.Size
	}
}

// replace makes es, sorted by path and each path once, the entries.
func (l *Ledger) replace(es []Entry) {
	l.Entries, l.Bytes = es, 0
	for _, e := range es {
		l.Bytes += e.Size
	}
}

// LedgerError is a ledger or journal that does not decode. It unwraps to
// errdefs.ErrDataLoss.
type LedgerError struct {
	File, Detail string
}

func (e *LedgerError) Error() string { return "staging ledger " + e.File + ": " + e.Detail }

// Unwrap classifies the error.
func (e *LedgerError) Unwrap() error { return errdefs.ErrDataLoss }

// Limits on what a ledger read accepts.
const (
	maxLedgerBytes = 1 << 30
	maxJournalLine = 1 << 20
)

// decodeLedger reads a ledger snapshot: one JSON document, strictly.
func decodeLedger(name string, r io.Reader) (*Ledger, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxLedgerBytes))
	if err != nil {
		return nil, &LedgerError{File: name, Detail: err.Error()}
	}
	l, ok := fastLedger(data)
	if !ok {
		l = &Ledger{}
		if err := artifact.DecodeStrictJSON(bytes.NewReader(data), l); err != nil {
			return nil, &LedgerError{File: name, Detail: err.Error()}
		}
	}
	if err := l.check(); err != nil {
		return nil, &LedgerError{File: name, Detail: err.Error()}
	}
	sort.Slice(l.Entries, func(i, j int) bool { return l.Entries[i].Path < l.Entries[j].Path })
	for i := 1; i < len(l.Entries); i++ {
		if l.Entries[i].Path == l.Entries[i-1].Path {
			return nil, &LedgerError{File: name, Detail: "path " + l.Entries[i].Path + " listed twice"}
		}
	}
	return l, nil
}

func (l *Ledger) check() error {
	if l.Schema != LedgerSchema {
		return fmt.Errorf("schema %d, want %d", l.Schema, LedgerSchema)
	}
	if !idRE.MatchString(l.ID) {
		return fmt.Errorf("bad lane id %q", l.ID)
	}
	switch l.State {
	case StateStaging, StateStaged, StateFailed, StateEvicted:
	default:
		return fmt.Errorf("bad state %q", l.State)
	}
	for _, e := range l.Entries {
		if err := e.check(); err != nil {
			return err
		}
	}
	return nil
}

// check refuses entries whose path would leave the lane's directory and
// impossible numbers: a ledger is only a record, but paths from it are
// removed on eviction.
func (e *Entry) check() error {
	if !localPath(e.Path) {
		return fmt.Errorf("entry path %q is not a clean relative path", e.Path)
	}
	switch e.Kind {
	case EntryBlob, EntryFile, EntryLink, EntrySparse:
	default:
		return fmt.Errorf("entry %s: bad kind %q", e.Path, e.Kind)
	}
	if e.Size < 0 {
		return fmt.Errorf("entry %s: negative size", e.Path)
	}
	for _, r := range e.Ranges {
		if r.Offset < 0 || r.Length < 0 || r.Offset > e.Size-r.Length || r.Rows[0] < 0 || r.Rows[1] < r.Rows[0] {
			return fmt.Errorf("entry %s: bad range of %q", e.Path, r.Table)
		}
	}
	return nil
}

// localPath reports whether p is a clean, relative, slash-separated path
// that stays below its root.
func localPath(p string) bool {
	return p != "" && p != "." && filepath.IsLocal(p) && filepath.ToSlash(filepath.Clean(p)) == p && !strings.Contains(p, "\\")
}

// replayJournal applies a journal's entries to l: one JSON entry per line,
// each complete line checked. A torn last line (a crash mid-append) is
// ignored; any other bad line stops the replay with an error, keeping what
// came before it.
func replayJournal(name string, l *Ledger, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var es []Entry
	defer func() { l.set(es...) }()
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err == io.EOF {
			return nil
		}
		if err == errTorn {
			return nil
		}
		if err != nil {
			return &LedgerError{File: name, Detail: fmt.Sprintf("line %d: %v", lineNo, err)}
		}
		var e Entry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return &LedgerError{File: name, Detail: fmt.Sprintf("line %d: %v", lineNo, err)}
		}
		if dec.More() {
			return &LedgerError{File: name, Detail: fmt.Sprintf("line %d: data after the entry", lineNo)}
		}
		if err := e.check(); err != nil {
			return &LedgerError{File: name, Detail: fmt.Sprintf("line %d: %v", lineNo, err)}
		}
		es = append(es, e)
	}
}

var errTorn = errors.New("torn line")

// readLine reads one newline-terminated line of at most maxJournalLine
// bytes without the newline; a last line without one is errTorn.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxJournalLine {
			return nil, fmt.Errorf("longer than %d bytes", maxJournalLine)
		}
		switch err {
		case nil:
			return line[:len(line)-1], nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(line) == 0 {
				return nil, io.EOF
			}
			return nil, errTorn
		default:
			return nil, err
		}
	}
}

var nodeUnsafeRE = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// laneKey is the file name stem of a lane's ledger on a node.
func laneKey(id, node string) string {
	return id + "@" + nodeUnsafeRE.ReplaceAllString(node, "_")
}
