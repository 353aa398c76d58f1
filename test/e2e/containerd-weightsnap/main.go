// Command containerd-weightsnap is containerd 2.x with weightsnap's
// snapshotter compiled in (cmd/weightsnapd/plugin): containerd's own main,
// its builtins, and one more import. The end-to-end test of the built-in
// mode builds and runs it (TestBuiltinContainerd).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/cmd/containerd/command"

	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
	_ "github.com/weightsnap/weightsnap/cmd/weightsnapd/plugin"
)

func main() {
	if err := command.App().Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		os.Exit(1)
	}
}
