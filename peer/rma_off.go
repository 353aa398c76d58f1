//go:build !libfabric

package peer

import (
	"context"
	"github.com/weightsnap/weightsnap/peer/internal/fabric"
	"time"
)

// rmaBuilt says whether this build has the rma data plane (build tag libfabric).
const rmaBuilt = false

func probeRMA(string) error { return unsupported(ModeRMA, fabric.Missing) }

func newRMAServePlane(string, *session, []string, time.Duration) (servePlane, error) {
	return nil, unsupported(ModeRMA, fabric.Missing)
}

func (f *fetcher) runRMA(context.Context, *clientSession, [][]*unit) error {
	return unsupported(ModeRMA, fabric.Missing)
}
