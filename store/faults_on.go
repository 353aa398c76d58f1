//go:build faults

package store

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// faultPoint acts when WEIGHTSNAP_FAULT names this point, as
// "POINT[@N]:ACTION": at the N-th pass (default 1), ACTION "kill" sends
// SIGKILL to this process; "wait" creates WEIGHTSNAP_FAULT_DIR/POINT.reached
// and blocks until WEIGHTSNAP_FAULT_DIR/POINT.go exists. With
// WEIGHTSNAP_FAULT_TRACE set, every point passed is first announced by a
// stat of $WEIGHTSNAP_FAULT_TRACE<POINT>, which the power-cut test
// filesystem (test/powercut) logs and can cut power at.
func faultPoint(name string) {
	if trace := os.Getenv("WEIGHTSNAP_FAULT_TRACE"); trace != "" {
		os.Lstat(trace + name)
	}
	spec := os.Getenv("WEIGHTSNAP_FAULT")
	point, action, _ := strings.Cut(spec, ":")
	point, nth, _ := strings.Cut(point, "@")
	if point != name {
		return
	}
	want := 1
	if n, err := strconv.Atoi(nth); err == nil {
		want = n
	}
	faultMu.Lock()
	faultPasses[name]++
	hit := faultPasses[name] == want
	faultMu.Unlock()
	if !hit {
		return
	}
	switch action {
	case "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "wait":
		dir := os.Getenv("WEIGHTSNAP_FAULT_DIR")
		os.WriteFile(dir+"/"+name+".reached", nil, 0o644)
		for {
			if _, err := os.Stat(dir + "/" + name + ".go"); err == nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// syncSkipped says whether WEIGHTSNAP_FAULT is "STEP:skip-sync": a test
// switch that leaves out the directory sync named STEP, so the power-cut
// harness can prove that it catches a missing one.
func syncSkipped(step string) bool {
	return os.Getenv("WEIGHTSNAP_FAULT") == step+":skip-sync"
}

// faultPasses counts passes per point; only test binaries built with the
// faults tag have it, and they are single-purpose processes.
var (
	faultMu     sync.Mutex
	faultPasses = map[string]int{}
)
