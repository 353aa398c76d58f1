package snapshotter

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
)

// useState is how a holder uses an artifact.
type useState uint8

const (
	// useLeased: the holder has the artifact's lease (the lease table
	// keeps one per artifact while any holder has it).
	useLeased useState = iota + 1
	// useRepairing: the holder waits for a repair to bring it the
	// artifact (its weights for a fallback snapshot, the lease for a user).
	useRepairing
)

// holderTable is the one record, in memory, of what uses which artifact:
// each holder and every artifact it uses, leased or repairing. A holder is
// an active snapshot (by its key: a container's rootfs, an image volume, a
// view), a fallback snapshot waiting for its weights (by its name) or a host
// mount (mountHolderPrefix and its mount point), which keeps its record
// here too. An active snapshot over several weight snapshots uses several
// artifacts. It calls nothing while it holds its mutex, so the lease table
// and the repairs may consult it under theirs.
type holderTable struct {
	metrics *Metrics

	mu sync.Mutex
	by map[string]*holder
}

type holder struct {
	uses  map[artifact.ID]useState
	mount *control.HostMountInfo // a host mount's record; nil for a snapshot
}

func newHolderTable(m *Metrics) *holderTable {
	return &holderTable{metrics: m, by: map[string]*holder{}}
}

// entry returns the holder name, made when missing; t.mu is held.
func (t *holderTable) entry(name string) *holder {
	h := t.by[name]
	if h == nil {
		h = &holder{uses: map[artifact.ID]useState{}}
		t.by[name] = h
	}
	return h
}

// set records that name uses id in state st.
func (t *holderTable) set(name string, id artifact.ID, st useState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entry(name).uses[id] = st
	t.changed()
}

// promote ends the repair of name's use of id: it is leased now, or (a
// committed weight snapshot filled in, which holds no lease) over. False
// when name was not waiting for id (removed, or repaired, meanwhile).
func (t *holderTable) promote(name string, id artifact.ID, leased bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.by[name]
	if h == nil || h.uses[id] != useRepairing {
		return false
	}
	if leased {
		h.uses[id] = useLeased
	} else {
		delete(h.uses, id)
		t.dropIfEmpty(name, h)
	}
	t.changed()
	return true
}

// drop forgets name (a snapshot removed or committed, a host mount undone)
// and returns the artifacts it had leased.
func (t *holderTable) drop(name string) []artifact.ID {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.by[name]
	if h == nil {
		return nil
	}
	delete(t.by, name)
	t.changed()
	var leased []artifact.ID
	for id, st := range h.uses {
		if st == useLeased {
			leased = append(leased, id)
		}
	}
	return leased
}

// dropIfEmpty removes a holder that uses nothing and has no record; t.mu
// is held.
func (t *holderTable) dropIfEmpty(name string, h *holder) {
	if len(h.uses) == 0 && h.mount == nil {
		delete(t.by, name)
	}
}

// has says whether name uses id in state st.
func (t *holderTable) has(name string, id artifact.ID, st useState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.by[name]
	return h != nil && h.uses[id] == st
}

// of lists, sorted, the holders that use id in state st.
func (t *holderTable) of(id artifact.ID, st useState) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, h := range t.by {
		if h.uses[id] == st {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// anyOf says whether some holder uses id in state st.
func (t *holderTable) anyOf(id artifact.ID, st useState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.by {
		if h.uses[id] == st {
			return true
		}
	}
	return false
}

// setMount records the host mount mi (its holder's record).
func (t *holderTable) setMount(mi control.HostMountInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entry(mountHolderPrefix + mi.Dir).mount = &mi
	t.changed()
}

// mount returns the record of the host mount on dir.
func (t *holderTable) mount(dir string) (control.HostMountInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.by[mountHolderPrefix+dir]
	if h == nil || h.mount == nil {
		return control.HostMountInfo{}, false
	}
	return *h.mount, true
}

// mounts lists the host mounts, by mount point, each Leased when it has
// its artifact's lease.
func (t *holderTable) mounts() []control.HostMountInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []control.HostMountInfo{}
	for _, h := range t.by {
		if h.mount != nil {
			mi := *h.mount
			mi.Leased = h.uses[mi.ID] == useLeased
			out = append(out, mi)
		}
	}
	slices.SortFunc(out, func(a, b control.HostMountInfo) int { return strings.Compare(a.Dir, b.Dir) })
	return out
}

// changed updates the gauges the table answers; t.mu is held.
func (t *holderTable) changed() {
	mounts, waiting := 0, 0
	for _, h := range t.by {
		if h.mount != nil {
			mounts++
		}
		if slices.Contains(slices.Collect(maps.Values(h.uses)), useRepairing) {
			waiting++
		}
	}
	t.metrics.hostMounts.Set(float64(mounts))
	t.metrics.pendingRepairs.Set(float64(waiting))
}
