package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestInfo(t *testing.T) {
	i := Get()
	if i.Version == "" || !strings.HasPrefix(i.GoVersion, "go") {
		t.Fatalf("Get() = %+v", i)
	}
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26"}, "v1.2.3, abc, go1.26"},
		{Info{Version: "(devel)", Revision: "abc", Modified: true, GoVersion: "go1.26"}, "(devel), abc (modified), go1.26"},
		{Info{Version: "(devel)", GoVersion: "go1.26"}, "(devel), unknown revision, go1.26"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "v1", Revision: "r", GoVersion: "go1"}.Collector())
	want := `# HELP weightsnap_build_info Always 1; labelled with the running build's module version, VCS revision and Go version.
# TYPE weightsnap_build_info gauge
weightsnap_build_info{goversion="go1",revision="r",version="v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "weightsnap_build_info"); err != nil {
		t.Fatal(err)
	}
}
