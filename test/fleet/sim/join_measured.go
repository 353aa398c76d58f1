package sim

import "time"

// The join's control-plane costs as peer's BenchmarkJoin measured them over loopback TCP
// (docs/fleet.md, "The join, measured", has the command, the machine and the date). The
// calibration and the predictions take these, not assumptions.
const (
	// MeasuredOpen is a session opened and closed: the request, the manifest, the answer. The
	// striped forest takes it for every hop of the manifest down a stripe.
	MeasuredOpen = 25700 * time.Microsecond
	// MeasuredListBase and MeasuredListPerPeer make a listing round over n peers (hellos
	// answered at once): the line through the measured rounds over 1 and 256 peers.
	MeasuredListBase    = 4660 * time.Microsecond
	MeasuredListPerPeer = 3740 * time.Microsecond
)

// MeasuredJoin is p with the join's measured costs: its session open and its listing round.
func MeasuredJoin(p Params) Params {
	p.Open, p.ListBase, p.ListPerPeer = MeasuredOpen, MeasuredListBase, MeasuredListPerPeer
	return p
}
