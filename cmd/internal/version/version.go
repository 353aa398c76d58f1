// Package version says which build of weightsnap is running: the module
// version and the VCS revision the Go toolchain stamped into the binary.
package version

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is what the build stamped into the binary.
type Info struct {
	Version   string `json:"version"`  // the main module's version, "(devel)" for a local build
	Revision  string `json:"revision"` // the VCS commit, "" when built outside a checkout
	Modified  bool   `json:"modified"` // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
}

// Get reads the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line `weightsnap version` prints.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown revision"
	} else if i.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("%s, %s, %s", i.Version, rev, i.GoVersion)
}

// Collector is the weightsnap_build_info gauge: always 1, labelled with
// the build's version, revision and Go version.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "weightsnap_build_info",
		Help:        "Always 1; labelled with the running build's module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
