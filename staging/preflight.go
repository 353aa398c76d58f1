package staging

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/procs"
	"golang.org/x/sys/unix"
)

// Problem is a preflight check that failed: staging stops before it
// writes anything.
type Problem struct {
	Lane   string `json:"lane,omitempty"`
	Check  string `json:"check"` // source, max_used, min_free, page_cache
	Detail string `json:"detail"`
	class  error
}

// Err is nil when nothing stops the plan; otherwise it says that the recipe
// cannot be staged as things are, naming every problem, classified as the
// first problem is: errdefs.ErrResourceExhausted for space and memory,
// errdefs.ErrUnavailable for an unreachable source.
func (p *Plan) Err() error {
	if len(p.Problems) == 0 {
		return nil
	}
	parts := make([]string, len(p.Problems))
	for i, pr := range p.Problems {
		parts[i] = pr.Check + ": " + pr.Detail
		if pr.Lane != "" {
			parts[i] = "lane " + pr.Lane + ": " + parts[i]
		}
	}
	class := p.Problems[0].class
	if class == nil {
		class = errdefs.ErrFailedPrecondition
	}
	return fmt.Errorf("staging preflight: %s; nothing was written: %w", strings.Join(parts, "; "), class)
}

// FSPlan is one destination filesystem of a plan.
type FSPlan struct {
	Path  string   `json:"path"` // an existing folder on it
	Lanes []string `json:"lanes"`
	Total int64    `json:"total"`
	Used  int64    `json:"used"`
	Free  int64    `json:"free"`  // available to the user staging
	Limit int64    `json:"limit"` // max_used in bytes (the lowest of its lanes')
	Need  int64    `json:"need"`  // bytes staging writes at most
	Frees int64    `json:"frees"` // bytes the planned evictions free
}

// bytesStr names a byte count exactly and readably.
func bytesStr(n int64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}

// preflight checks space, the watermark and memory for the lanes to stage,
// plans the evictions that keep each destination under its watermark, and
// records problems in the plan. all gives every lane's ledger, read only
// where a filesystem would go over its watermark.
func (e *Engine) preflight(ctx context.Context, lanes []*lanePlan, all func() ([]*Ledger, error), plan *Plan) error {
	exclude := map[string]bool{}
	var order []uint64
	groups := map[uint64][]*lanePlan{}
	for _, lp := range lanes {
		exclude[lp.b.ID] = true
		if lp.trusted {
			continue
		}
		if _, ok := groups[lp.dev]; !ok {
			order = append(order, lp.dev)
		}
		groups[lp.dev] = append(groups[lp.dev], lp)
	}
	var open map[procs.Inode]int
	for _, dev := range order {
		group := groups[dev]
		var st unix.Statfs_t
		if err := unix.Statfs(group[0].fsDir, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", group[0].fsDir, err)
		}
		bs := int64(st.Bsize)
		fs := FSPlan{Path: group[0].fsDir, Total: int64(st.Blocks) * bs, Free: int64(st.Bavail) * bs}
		fs.Used = fs.Total - int64(st.Bfree)*bs
		fs.Limit = -1
		for _, lp := range group {
			fs.Lanes = append(fs.Lanes, lp.b.ID)
			fs.Need += lp.public.CopyBytes
			if l := lp.b.MaxUsed.Limit(fs.Total); fs.Limit < 0 || l < fs.Limit {
				fs.Limit = l
			}
		}
		if fs.Used+fs.Need > fs.Limit {
			ledgers, err := all()
			if err != nil {
				return err
			}
			if open == nil {
				open = procs.OpenInodes()
			}
			for _, c := range e.evictable(dev, exclude, ledgers, open) {
				if fs.Used+fs.Need-fs.Frees <= fs.Limit {
					break
				}
				plan.Evict = append(plan.Evict, c)
				fs.Frees += c.Frees
			}
			if over := fs.Used + fs.Need - fs.Frees; over > fs.Limit {
				plan.Problems = append(plan.Problems, Problem{Check: "max_used", class: errdefs.ErrResourceExhausted,
					Detail: fmt.Sprintf("staging %s onto %s would fill it to %s of %s, over max_used %s; evicting every idle lane frees only %s",
						bytesStr(fs.Need), fs.Path, bytesStr(over), bytesStr(fs.Total), bytesStr(fs.Limit), bytesStr(fs.Frees))})
			}
		}
		for _, lp := range group {
			if left := fs.Free + fs.Frees - fs.Need; left < int64(lp.b.MinFree) {
				plan.Problems = append(plan.Problems, Problem{Lane: lp.b.ID, Check: "min_free", class: errdefs.ErrResourceExhausted,
					Detail: fmt.Sprintf("%s has %s free; staging writes up to %s and would leave %s, under min_free %s",
						fs.Path, bytesStr(fs.Free+fs.Frees), bytesStr(fs.Need), bytesStr(left), bytesStr(int64(lp.b.MinFree)))})
			}
		}
		plan.Filesystems = append(plan.Filesystems, fs)
	}
	return e.checkMemory(lanes, plan)
}

// checkMemory checks the page cache can hold each lane that sets
// keep_in_memory: its working set plus keep_in_memory must fit in the
// memory available now.
func (e *Engine) checkMemory(lanes []*lanePlan, plan *Plan) error {
	var avail int64 = -1
	for _, lp := range lanes {
		if lp.b.KeepInMemory == 0 {
			continue
		}
		if avail < 0 {
			a, err := memAvailable()
			if err != nil {
				return err
			}
			avail = a
		}
		if need := lp.public.Bytes + int64(lp.b.KeepInMemory); need > avail {
			plan.Problems = append(plan.Problems, Problem{Lane: lp.b.ID, Check: "page_cache", class: errdefs.ErrResourceExhausted,
				Detail: fmt.Sprintf("the lane's working set %s plus keep_in_memory %s needs %s of page cache, but only %s of memory is available",
					bytesStr(lp.public.Bytes), bytesStr(int64(lp.b.KeepInMemory)), bytesStr(need), bytesStr(avail))})
		}
	}
	return nil
}

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemAvailable(raw)
}

func parseMemAvailable(raw []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseUint(f[0], 10, 63-10)
		if err != nil {
			break
		}
		return int64(kb) << 10, nil
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemAvailable line in kB")
}
