package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Measured is what scripts/bench-fleet.sh measured (BENCH_FLEET_JSON writes it): the fleet's
// setting and, for every round with the nodes as each other's peers, each node's time to READY and
// where its copy came from. The calibration reads it from testdata.
type Measured struct {
	Command   string  `json:"command"` // the command that measured it
	Size      string  `json:"size"`    // weightsnap dev synth --size: <n>KiB, MiB or GiB
	Bytes     int64   `json:"bytes"`   // the artifact's payload bytes (its files')
	Shards    int     `json:"shards"`
	RateMbit  int     `json:"rate_mbit"`  // every link's rate, both ways (tbf)
	Cores     int     `json:"cores"`      // the machine's
	Load      string  `json:"load"`       // its load average at the end
	UnshapedS float64 `json:"unshaped_s"` // one node alone, links unshaped
	AloneS    float64 `json:"alone_s"`    // one node alone on the shaped links
	// Structure is the fleet rounds' [peer] structure: "chain" (or empty, a file that predates
	// it) or "forest", the striped forest of stripes.DefaultStripes.
	Structure string `json:"structure,omitempty"`
	// Congestion is the nodes' TCP congestion control (BENCH_FLEET_CC, cubic by default); empty in a
	// file that predates it, whose nodes took the host's.
	Congestion string          `json:"congestion,omitempty"`
	Rounds     []MeasuredRound `json:"rounds"`
}

// MeasuredRound is one rollout to Nodes nodes with the others as peers.
type MeasuredRound struct {
	Nodes  int            `json:"nodes"`
	Copies float64        `json:"copies"` // the origin's egress over the artifact's bytes
	Each   []MeasuredNode `json:"each"`   // in node order
}

// MeasuredNode is one node of a round.
type MeasuredNode struct {
	ReadyS float64 `json:"ready_s"` // from the common start to READY (resolve's exit)
	// Parent is the index in the round of the node its copy came from, -1 for the registry.
	Parent   int     `json:"parent"`
	FetchS   float64 `json:"fetch_s"`   // the transfer's own time, as its report says
	PublishS float64 `json:"publish_s"` // the publication's after it
}

// Ready is every node's time to READY, in node order.
func (r MeasuredRound) Ready() []float64 {
	out := make([]float64, len(r.Each))
	for i, n := range r.Each {
		out[i] = n.ReadyS
	}
	return out
}

// ReadMeasured reads a Measured file.
func ReadMeasured(path string) (*Measured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Measured
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Bytes <= 0 || m.RateMbit <= 0 || m.AloneS <= 0 || len(m.Rounds) == 0 {
		return nil, fmt.Errorf("%s: no setting or no rounds", path)
	}
	if _, err := sizeBytes(m.Size); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.Structure != "" && m.Structure != "chain" && m.Structure != "forest" {
		return nil, fmt.Errorf("%s: structure %q: want chain or forest", path, m.Structure)
	}
	return &m, nil
}

// sizeBytes parses the benchmark's sizes: a whole number of KiB, MiB or GiB.
func sizeBytes(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > 1<<(62-u.shift) {
				break
			}
			return n << u.shift, nil
		}
	}
	return 0, fmt.Errorf("size %q: want a whole number of KiB, MiB or GiB", s)
}

// Quantile is the q-quantile (0 < q <= 1) of xs by the nearest rank: the smallest x with at least
// a fraction q of xs at or below it. Of 16 values p50 is the 8th and p99 the 16th, the max; NaN of
// none.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}
