package peer

import (
	"sync"
	"sync/atomic"

	"github.com/weightsnap/weightsnap/store"
)

// fetchStats are what a fetch counts, for its progress and its report:
// the payload bytes it verified and reused, and the sessions it ran.
type fetchStats struct {
	onProgress func(n int64) // FetchOptions.Progress

	fetched, reused atomic.Int64
	reusedFiles     int        // kept whole; counted before any session
	resumedFiles    int        // kept in part, continued
	mu              sync.Mutex // sessions, which a striped fetch's stripes count at once
	sessions        sessionStats
}

// sessionStats are the sessions a fetch ran, for its report.
type sessionStats struct {
	Peer      string   // the last session's
	Peers     []string // every session's, in order, repeats dropped
	Mode      Mode
	Rails     int
	Failovers int
	Restarts  int
	Refused   []string // peers that served bytes that failed their check, of a striped fetch
}

// verified counts n payload bytes fetched and verified; it may be called
// from several goroutines at once.
func (s *fetchStats) verified(n int64) {
	s.fetched.Add(n)
	s.progress(n)
}

// reusedUnit counts n bytes of a kept file whose unit matched; it may be
// called from several goroutines at once.
func (s *fetchStats) reusedUnit(n int64) {
	s.reused.Add(n)
	s.progress(n)
}

// progress tells FetchOptions.Progress of n bytes done.
func (s *fetchStats) progress(n int64) {
	if s.onProgress != nil && n > 0 {
		s.onProgress(n)
	}
}

// done is the payload bytes verified or reused so far.
func (s *fetchStats) done() int64 { return s.fetched.Load() + s.reused.Load() }

// session counts a session with the peer at addr, restarted since the
// fetch's last session with it.
func (s *fetchStats) session(addr string, restarted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if restarted {
		s.sessions.Restarts++
	}
	s.sessions.Peer = addr
	if n := len(s.sessions.Peers); n == 0 || s.sessions.Peers[n-1] != addr {
		s.sessions.Peers = append(s.sessions.Peers, addr)
	}
}

// transfer is what the fetch moved, for store.TransferReporter.
func (s *fetchStats) transfer() store.Transfer {
	return store.Transfer{Endpoint: s.sessions.Peer, Mode: string(s.sessions.Mode), Rails: s.sessions.Rails,
		Fetched: s.fetched.Load(), Reused: s.reused.Load(), ReusedFiles: s.reusedFiles, ResumedFiles: s.resumedFiles}
}
