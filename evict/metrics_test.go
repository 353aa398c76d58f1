package evict_test

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/store"
)

// TestEvictionReasonsDocumented: docs/store.md names every reason label
// of weightsnap_store_evictions_total the policy counts.
func TestEvictionReasonsDocumented(t *testing.T) {
	_, p := open(t, t.TempDir(), store.DefaultPolicy())
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../docs/store.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	at := strings.Index(doc, "`weightsnap_store_evictions_total{reason}`")
	if at < 0 {
		t.Fatal("docs/store.md does not name weightsnap_store_evictions_total{reason}")
	}
	para := doc[at:]
	para = para[:strings.Index(para+"\n\n", "\n\n")]
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				n++
				if l.GetName() == "reason" && !strings.Contains(para, "`"+l.GetValue()+"`") {
					t.Errorf("docs/store.md does not name the reason %q", l.GetValue())
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the policy counts no reason")
	}
}
