package staging

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// DirName is the state directory's name under a store root.
const DirName = "staging"

// State is a node's staging state directory:
//
//	<dir>/ledger/<id>@<node>.json     the ledger of a lane, replaced atomically
//	<dir>/ledger/<id>@<node>.journal  entries verified since, one JSON line each
//	<dir>/locks/<id>@<node>.lock      held while a lane is staged or evicted
//
// Several nodes may share one directory: everything is keyed by node.
type State struct {
	Dir  string
	Node string
}

// OpenState opens (creating) the state directory of node.
func OpenState(dir, node string) (*State, error) {
	if node == "" {
		return nil, fmt.Errorf("staging: no node name: %w", errdefs.ErrInvalidArgument)
	}
	for _, sub := range []string{"ledger", "locks"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("staging state: %w", err)
		}
	}
	return &State{Dir: dir, Node: node}, nil
}

func (s *State) path(id, ext string) string {
	sub := "ledger"
	if ext == ".lock" {
		sub = "locks"
	}
	return filepath.Join(s.Dir, sub, laneKey(id, s.Node)+ext)
}

// Load reads a lane's ledger and replays its journal. A lane never staged
// on this node is errdefs.ErrNotFound. A ledger that does not decode is a
// *LedgerError; a journal line that does not decode ends the replay with
// one, returned with the ledger as far as it was read.
func (s *State) Load(id string) (*Ledger, error) {
	l, err := s.readSnapshot(id)
	if err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	f, jerr := os.Open(s.path(id, ".journal"))
	if errors.Is(jerr, os.ErrNotExist) {
		return l, err
	}
	if jerr != nil {
		return nil, fmt.Errorf("staging ledger: %w", jerr)
	}
	defer f.Close()
	if l == nil {
		l = &Ledger{Schema: LedgerSchema, ID: id, Node: s.Node, State: StateStaging}
	}
	return l, replayJournal(f.Name(), l, f)
}

func (s *State) readSnapshot(id string) (*Ledger, error) {
	f, err := os.Open(s.path(id, ".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("lane %s has no ledger on node %s: %w", id, s.Node, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("staging ledger: %w", err)
	}
	defer f.Close()
	l, err := decodeLedger(f.Name(), bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	if l.ID != id || l.Node != s.Node {
		return nil, &LedgerError{File: f.Name(), Detail: fmt.Sprintf("holds lane %s of node %s", l.ID, l.Node)}
	}
	return l, nil
}

// IDs lists the lanes with a ledger or a journal on this node.
func (s *State) IDs() ([]string, error) {
	names, err := os.ReadDir(filepath.Join(s.Dir, "ledger"))
	if err != nil {
		return nil, fmt.Errorf("staging state: %w", err)
	}
	suffix := "@" + nodeUnsafeRE.ReplaceAllString(s.Node, "_")
	seen := map[string]bool{}
	var ids []string
	for _, n := range names {
		stem := strings.TrimSuffix(strings.TrimSuffix(n.Name(), ".json"), ".journal")
		id, ok := strings.CutSuffix(stem, suffix)
		if ok && idRE.MatchString(id) && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Save replaces a lane's ledger atomically and drops its journal; durable
// also syncs it (artifact.Durable). A save that only records a use is
// volatile: a crash may lose the new last use, never a part of the ledger.
func (s *State) Save(l *Ledger, durable bool) error {
	raw, err := encodeLedger(l)
	if err != nil {
		return err
	}
	p := s.path(l.ID, ".json")
	if err := artifact.WriteFileAtomic(p, append(raw, '\n'), 0o644, durable); err != nil {
		return fmt.Errorf("staging ledger: %w", err)
	}
	if err := os.Remove(s.path(l.ID, ".journal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("staging ledger: %w", err)
	}
	return nil
}

// journal appends verified entries to a lane's journal.
type journal struct {
	f   *os.File
	buf []byte
}

func (s *State) openJournal(id string) (*journal, error) {
	f, err := os.OpenFile(s.path(id, ".journal"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("staging journal: %w", err)
	}
	return &journal{f: f}, nil
}

// add queues an entry; flush writes the queued ones.
func (j *journal) add(e Entry) error {
	raw, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.buf = append(append(j.buf, raw...), '\n')
	return nil
}

// flush appends the queued entries and syncs the journal. The caller has
// made the files they describe durable first.
func (j *journal) flush() error {
	if len(j.buf) == 0 {
		return nil
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("staging journal: %w", err)
	}
	j.buf = j.buf[:0]
	return j.f.Sync()
}

func (j *journal) close() error { return j.f.Close() }

// laneLock is an exclusive lock on a lane.
type laneLock struct{ f *os.File }

// lock takes a lane's lock without waiting: a lane another process is
// staging or evicting is busy (errdefs.ErrUnavailable).
func (s *State) lock(id string) (*laneLock, error) {
	f, err := os.OpenFile(s.path(id, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("staging lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lane %s is being staged or evicted by another process: %w", id, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("staging lock %s: %w", id, err)
	}
	return &laneLock{f: f}, nil
}

func (l *laneLock) unlock() {
	if l != nil {
		l.f.Close()
	}
}
