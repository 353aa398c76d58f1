//go:build bench

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/benchrow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIProxyLatency (make bench): what weightsnapd's
// CRI image service adds to the calls it forwards. ImageStatus and
// ListImages, 1,000 calls each, straight to containerd's CRI and through
// weightsnapd's socket, interleaved, in BENCH_REPS rounds (5); it prints the
// 50th and 99th percentiles and what the proxy adds at the 99th (goal: at
// most 2 ms), each the median of the rounds' with min and max
// (test/benchrow).
func TestCRIProxyLatency(t *testing.T) {
	c := startCRINode(t)
	img := c.reg.Ref("busybox:latest")
	if _, err := c.ctd.Crictl("pull", img); err != nil {
		t.Fatal(err)
	}
	dial := func(sock string) runtime.ImageServiceClient {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return runtime.NewImageServiceClient(conn)
	}
	paths := []struct {
		name string
		c    runtime.ImageServiceClient
	}{{"containerd", dial(c.ctd.Socket)}, {"weightsnapd", dial(c.ws.CRI)}}
	calls := []struct {
		name string
		call func(context.Context, runtime.ImageServiceClient) error
	}{
		{"ImageStatus", func(ctx context.Context, s runtime.ImageServiceClient) error {
			_, err := s.ImageStatus(ctx, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: img}})
			return err
		}},
		{"ListImages", func(ctx context.Context, s runtime.ImageServiceClient) error {
			_, err := s.ListImages(ctx, &runtime.ListImagesRequest{})
			return err
		}},
	}
	const n = 1000
	reps := benchrow.Reps()
	ctx := context.Background()
	fmt.Printf("\nweightsnapd's CRI image service: %d rounds of %d calls each, interleaved with the same calls to containerd's CRI; ms, median [min-max] of the rounds\n", reps, n)
	fmt.Printf("%-12s %20s %20s %20s %20s %20s\n", "call", "direct p50", "direct p99", "proxy p50", "proxy p99", "added at p99")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, cl := range calls {
		var dp50, dp99, wp50, wp99, added benchrow.Runs
		for range reps {
			took := map[string][]time.Duration{}
			for i := range 2 * n {
				p := paths[i%2]
				start := time.Now()
				if err := cl.call(ctx, p.c); err != nil {
					t.Fatalf("%s through %s: %v", cl.name, p.name, err)
				}
				took[p.name] = append(took[p.name], time.Since(start))
			}
			q := func(d []time.Duration, f float64) float64 {
				slices.Sort(d)
				return ms(d[int(f*float64(len(d)-1))])
			}
			d, w := took["containerd"], took["weightsnapd"]
			dp50, dp99, wp50, wp99 = append(dp50, q(d, 0.5)), append(dp99, q(d, 0.99)), append(wp50, q(w, 0.5)), append(wp99, q(w, 0.99))
			added = append(added, q(w, 0.99)-q(d, 0.99))
		}
		fmt.Printf("%-12s %20s %20s %20s %20s %20s\n", cl.name, dp50.Format(2), dp99.Format(2), wp50.Format(2), wp99.Format(2), added.Format(2))
	}
}
