package main

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
)

// TestConfigDefault: `weightsnapd config default` prints the whole file,
// which parses back to the defaults.
func TestConfigDefault(t *testing.T) {
	var out bytes.Buffer
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"config", "default"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got, err := config.Parse("printed", out.Bytes())
	if err != nil || !reflect.DeepEqual(got, config.Default()) {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
