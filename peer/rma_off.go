//go:build !libfabric

package peer

import (
	"context"
	"time"

	"github.com/weightsnap/weightsnap/peer/internal/fabric"
)

func probeRMA(string) error { return unsupported(ModeRMA, fabric.Missing) }

func newRMAServePlane(string, *session, []string, time.Duration) (servePlane, error) {
	return nil, unsupported(ModeRMA, fabric.Missing)
}

func (f *fetcher) runRMA(context.Context, *clientSession, [][]*unit) error {
	return unsupported(ModeRMA, fabric.Missing)
}
