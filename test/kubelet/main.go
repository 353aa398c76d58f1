// Command kubelet is Kubernetes' kubelet (k8s.io/kubernetes/cmd/kubelet) built from the pinned
// k8s.io/kubernetes module for the end-to-end tests; test/e2e/deps builds it with its version stamped in.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
