package resolve

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// TestSourcesErrorCrossesGRPC: the snapshotter returns a resolution's
// terminal failure over gRPC, whose encoding follows every Unwrap; a
// SourcesError with and without a policy refusal keeps its class there.
func TestSourcesErrorCrossesGRPC(t *testing.T) {
	refusal := fmt.Errorf("refused by policy: %w", errdefs.ErrPermissionDenied)
	for _, tc := range []struct {
		name    string
		refused error
		is      func(error) bool
	}{
		{name: "no refusal", is: errdefs.IsUnavailable},
		{name: "a refusal", refused: refusal, is: errdefs.IsUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &SourcesError{Passed: []Passed{{Source: "registry", Outcome: "failed", Why: "unreachable"}}, refused: tc.refused}
			f := &Failure{Kind: KindUnreachable, Step: StepRemote, Source: "registry", Retry: true, Err: e}
			back := errgrpc.ToNative(errgrpc.ToGRPC(fmt.Errorf("weights for /models/x: %w", f)))
			if !tc.is(back) {
				t.Errorf("over gRPC %v lost its class", back)
			}
			if got := errors.Is(f, refusal); got != (tc.refused != nil) {
				t.Errorf("errors.Is(the failure, the refusal) = %v", got)
			}
		})
	}
}
