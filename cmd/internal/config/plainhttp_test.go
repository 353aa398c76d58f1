package config

import (
	"reflect"
	"testing"

	"github.com/containerd/errdefs"
)

// TestPlainHTTPForms: [resolve] plain_http is a boolean (true: every
// registry) or a list of registries, and the flag's value the same; the
// registry options follow it, and a list round-trips through Encode.
func TestPlainHTTPForms(t *testing.T) {
	for _, tc := range []struct {
		file      string
		all       bool
		hosts     []string
		refused   bool
		flagValue string
	}{
		{file: "[resolve]\nplain_http = true\n", all: true, flagValue: "true"},
		{file: "[resolve]\nplain_http = false\n", flagValue: "false"},
		{file: "[resolve]\nplain_http = [\"127.0.0.1:5500\", \"localhost:5000\"]\n", hosts: []string{"127.0.0.1:5500", "localhost:5000"}, flagValue: "127.0.0.1:5500,localhost:5000"},
		{file: "resolve.plain_http = [\"127.0.0.1:5500\"]\n", hosts: []string{"127.0.0.1:5500"}, flagValue: "127.0.0.1:5500"},
		{file: "[resolve]\nplain_http = \"yes\"\n", refused: true},
		{file: "[resolve]\nplain_http = [1]\n", refused: true},
		{file: "[resolve]\nplain_http = [\"http://127.0.0.1:5500\"]\n", refused: true},
	} {
		cfg, err := Parse("t", []byte(tc.file))
		if tc.refused {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("%q: %v, want refused as bad input", tc.file, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.file, err)
			continue
		}
		o := cfg.Resolve.RegistryOptions("t")
		if o.PlainHTTP != tc.all || !reflect.DeepEqual(o.PlainHTTPHosts, tc.hosts) {
			t.Errorf("%q: options plain HTTP %v, hosts %q", tc.file, o.PlainHTTP, o.PlainHTTPHosts)
		}
		raw, err := cfg.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("encoded", raw)
		if err != nil || !reflect.DeepEqual(back.Resolve.PlainHTTP, cfg.Resolve.PlainHTTP) {
			t.Errorf("%q: round trip %+v, %v", tc.file, back.Resolve.PlainHTTP, err)
		}
		var flag PlainHTTP
		if err := flag.Set(tc.flagValue); err != nil || flag.All != tc.all || !reflect.DeepEqual(flag.Hosts, tc.hosts) {
			t.Errorf("--plain-http=%s: %+v, %v", tc.flagValue, flag, err)
		}
	}
}
