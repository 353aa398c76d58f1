package store

// The checkpoints of a file written in order by a build of a known
// identity (fileWriter.keep): the hash stage snapshots the hasher's state
// where each part ends, the write stage says how far it wrote, and the
// checkpointer syncs the file and records a snapshot once both are past it.

// snapshot is a file's hasher state at off.
type snapshot struct {
	off   int64
	state []byte
}

// checkpointer syncs the file and records each snapshot handed to it.
// A failed checkpoint only costs what a later build could have reused.
func (w *fileWriter) checkpointer() {
	defer close(w.ckDone)
	failed := false
	for s := range w.ckQ {
		if failed {
			continue
		}
		if syncData(w.f) != nil || w.record(s.off, s.state) != nil {
			failed = true
		}
	}
}

// snapshotted keeps the hasher's state where a part ends, and every
// checkpointEvery bytes hands one over to be recorded once the write
// stage has written that far.
func (w *fileWriter) snapshotted() {
	if w.keep == nil {
		return
	}
	off, state, ok := w.hasher.State()
	if !ok {
		return
	}
	w.ckMu.Lock()
	defer w.ckMu.Unlock()
	w.latest = snapshot{off, state}
	if off-w.lastAt < w.every {
		return
	}
	w.lastAt = off
	w.snap = &w.latest
	w.handOver()
}

// handOver gives the pending snapshot to the checkpointer once the write
// stage has written past it; a checkpointer still busy with the previous
// one drops it. The caller holds ckMu.
func (w *fileWriter) handOver() {
	if w.snap == nil || w.wrote < w.snap.off {
		return
	}
	select {
	case w.ckQ <- *w.snap:
	default:
	}
	w.snap = nil
}

// wroteTo is called by the write stage after each write.
func (w *fileWriter) wroteTo(end int64) {
	if w.keep == nil {
		return
	}
	w.ckMu.Lock()
	defer w.ckMu.Unlock()
	w.wrote = end
	w.handOver()
}

// stopCheckpoints waits for the checkpointer; its descriptor's last use.
func (w *fileWriter) stopCheckpoints() {
	if w.ckQ != nil {
		close(w.ckQ)
		<-w.ckDone
		w.ckQ = nil
	}
}

// keepStopped records a last checkpoint of a file stopped part way, its
// stages drained (every byte submitted was both hashed and written): at
// the end of the last part it hashed.
func (w *fileWriter) keepStopped(drainErr error) {
	if w.keep == nil || drainErr != nil {
		return
	}
	w.ckMu.Lock()
	last := w.latest
	w.ckMu.Unlock()
	if last.off <= w.keptOff.Load() {
		return
	}
	if syncData(w.f) == nil {
		w.record(last.off, last.state)
	}
}

// record records a checkpoint at off, the file synced that far.
func (w *fileWriter) record(off int64, state []byte) error {
	if err := w.keep(off, state); err != nil {
		return err
	}
	w.keptOff.Store(off)
	return nil
}
