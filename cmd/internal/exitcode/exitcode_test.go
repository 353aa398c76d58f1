package exitcode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("plain"), Other},
		{errdefs.ErrInternal, Other},
		{context.Canceled, Other},
		{fmt.Errorf("--rate: %w", errdefs.ErrInvalidArgument), BadInput},
		{fmt.Errorf("artifact not in store: %w", errdefs.ErrNotFound), NotFound},
		{fmt.Errorf("artifact is invalid: %w", errdefs.ErrDataLoss), InvalidData},
		{fmt.Errorf("artifact is leased: %w", errdefs.ErrFailedPrecondition), Busy},
		{fmt.Errorf("store is out of space: %w", errdefs.ErrResourceExhausted), Busy},
		{fmt.Errorf("timed out waiting for a lock: %w", errdefs.ErrUnavailable), Busy},
		{fmt.Errorf("scrub: %w", context.DeadlineExceeded), Busy},
		{fmt.Errorf("peer 127.0.0.1:1: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), Busy},
		{fmt.Errorf("peer: %w", &net.DNSError{Err: "no such host", Name: "weights.invalid", IsNotFound: true}), Busy},
		{fmt.Errorf("read index: %w", io.ErrUnexpectedEOF), Other},
		{fmt.Errorf("pull: %w", refusal{}), Refused},
		// The first class in the table wins when an error carries two.
		{errors.Join(errdefs.ErrNotFound, errdefs.ErrInvalidArgument), BadInput},
		{errors.Join(errdefs.ErrUnavailable, errdefs.ErrDataLoss), InvalidData},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestExecute(t *testing.T) {
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "tool", SilenceErrors: true, SilenceUsage: true}
		var rev string
		imp := &cobra.Command{Use: "import DIR", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error {
			return errors.New("the command's own failure")
		}}
		imp.Flags().StringVar(&rev, "revision", "", "")
		imp.MarkFlagRequired("revision")
		root.AddCommand(imp)
		return root
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"required flag missing", []string{"import", "dir"}, BadInput},
		{"unknown flag", []string{"import", "dir", "--revision", "r", "--bogus"}, BadInput},
		{"too many arguments", []string{"import", "a", "b", "--revision", "r"}, BadInput},
		{"unknown command", []string{"bogus"}, BadInput},
		{"the command ran and failed", []string{"import", "dir", "--revision", "r"}, Other},
	} {
		root := newRoot()
		root.SetArgs(tc.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := Execute(context.Background(), root)
		if err == nil || Of(err) != tc.want || strings.Count(err.Error(), "invalid argument") > 1 {
			t.Errorf("%s: %v (exit %d), want exit %d", tc.name, err, Of(err), tc.want)
		}
	}
}

func TestSignalled(t *testing.T) {
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		if got := Signalled(sig); got != want {
			t.Errorf("Signalled(%v) = %d, want %d", sig, got, want)
		}
	}
}

// refusal is a refusal by the trust policy, as trust.Refusal is one.
type refusal struct{}

func (refusal) Error() string      { return "trust policy scope \"s\" refuses it" }
func (refusal) TrustScope() string { return "s" }
func (refusal) Unwrap() error      { return errdefs.ErrPermissionDenied }
