package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/store"
)

// TestDefaultRoundTrip: the printed default file parses back to the defaults
// and names every table.
func TestDefaultRoundTrip(t *testing.T) {
	def := Default()
	raw, err := def.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"[store]", "[resolve]", "[snapshotter]", "[metrics]", "[peer]", "max_store_bytes", "address", "fabric_provider"} {
		if !strings.Contains(string(raw), table) {
			t.Fatalf("default file lacks %s:\n%s", table, raw)
		}
	}
	if regexp.MustCompile(`(?m)^\s*staged(_ceiling_bytes)?\s*=`).Match(raw) {
		t.Fatalf("default file names the first names of exports:\n%s", raw)
	}
	got, err := Parse("default", raw)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	def.StoreKeys = store.PolicyKeys() // the printed file sets every key of [store]
	if !reflect.DeepEqual(got, def) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", got, def)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		ok         bool
		check      func(Config) bool
	}{
		{"empty", "", true, func(c Config) bool { return reflect.DeepEqual(c, Default()) }},
		{"partial store table", "[store]\nmax_store_bytes = 1000\n", true, func(c Config) bool {
			want := store.DefaultPolicy()
			want.MaxStoreBytes = 1000
			return c.Store == want
		}},
		{"partial resolve table", "[resolve]\nregistry = \"reg.example:5000/models\"\n", true, func(c Config) bool {
			return c.Resolve.Mode == "preferred" && c.Resolve.AllowLocalBuild &&
				reflect.DeepEqual(c.Resolve.AllowedRegistries(), []string{"reg.example:5000"})
		}},
		{"post-load publication", "[resolve]\nallow_post_load_publish = true\n", true, func(c Config) bool {
			return c.Resolve.AllowPostLoadPublish && !Default().Resolve.AllowPostLoadPublish
		}},
		{"snapshotter root", "root = \"/srv/ws\"\n[snapshotter]\nroot = \"/srv/snaps\"\n", true, func(c Config) bool {
			return c.Root == "/srv/ws" && c.SnapshotRoot(c.Root) == "/srv/snaps" && c.Snapshotter.Address != ""
		}},
		{"derived snapshot root", "root = \"/srv/ws\"\n", true, func(c Config) bool {
			return c.SnapshotRoot(c.Root) == "/srv/ws/snapshots"
		}},
		{"metrics off", "[metrics]\naddress = \"\"\n", true, func(c Config) bool { return c.Metrics.Address == "" }},
		{"peer table", "[peer]\nserve = true\npeers = [\"10.0.0.1:7420\", \"weights.ns.svc\"]\nmode = \"rma\"\nrails = 2\n[[peer.exports]]\nname = \"llama\"\npath = \"/nas/llama\"\n", true, func(c Config) bool {
			return c.Peer.Serve && len(c.Peer.Peers) == 2 && c.Peer.Mode == "rma" && c.Peer.Rails == 2 && c.Peer.Exports[0].Path == "/nas/llama"
		}},
		{"peer connect timeout", "[peer]\nconnect_timeout_seconds = 2\n", true, func(c Config) bool {
			o, err := c.Peer.FetchOptions()
			return err == nil && o.Client.ConnectTimeout == 2*time.Second && Default().Peer.ConnectTimeoutSeconds == 5
		}},
		{"peer tcp congestion", "[peer]\ntcp_congestion = \"cubic\"\n", true, func(c Config) bool {
			o, err := c.Peer.FetchOptions()
			return err == nil && o.Client.Congestion == "cubic" && Default().Peer.TCPCongestion == ""
		}},
		{"negative peer connect timeout", "[peer]\nconnect_timeout_seconds = -1\n", false, nil},
		{"peer slow source", "[peer]\nslow_source_seconds = 3\n", true, func(c Config) bool {
			return c.Peer.SlowAfter() == 3*time.Second && Default().Peer.SlowAfter() == 5*time.Second
		}},
		{"peer slow source off", "[peer]\nslow_source_seconds = 0\n", true, func(c Config) bool { return c.Peer.SlowAfter() == 0 }},
		{"negative peer slow source", "[peer]\nslow_source_seconds = -1\n", false, nil},
		{"exports under their first name", "[peer]\nstaged_ceiling_bytes = 4096\n[[peer.staged]]\nname = \"llama\"\npath = \"/nas/llama\"\n", true, func(c Config) bool {
			return len(c.Peer.Exports) == 1 && c.Peer.Exports[0].Name == "llama" && c.Peer.ExportCeilingBytes == 4096 &&
				c.Peer.StagedAlias == nil && c.Peer.StagedCeilingAlias == nil
		}},
		{"export ceiling", "[peer]\nexport_ceiling_bytes = 4096\n", true, func(c Config) bool { return c.Peer.ExportCeilingBytes == 4096 }},
		{"exports under both names", "[[peer.exports]]\nname = \"a\"\npath = \"/a\"\n[[peer.staged]]\nname = \"b\"\npath = \"/b\"\n", false, nil},
		{"export ceiling under both names", "[peer]\nexport_ceiling_bytes = 4096\nstaged_ceiling_bytes = 4096\n", false, nil},
		{"bad peer mode", "[peer]\nmode = \"udp\"\n", false, nil},
		{"peer key without cert", "[peer]\ntls_key = \"k.pem\"\n", false, nil},
		{"unknown key", "[store]\nbogus = 1\n", false, nil},
		{"unknown table", "[bogus]\n", false, nil},
		{"bad mode", "[resolve]\nmode = \"sometimes\"\n", false, nil},
		{"bad validation", "[resolve]\nvalidation = \"some\"\n", false, nil},
		{"pod network metrics", "[metrics]\naddress = \"0.0.0.0:9878\"\n", true, func(c Config) bool { return c.Metrics.Address == "0.0.0.0:9878" }},
		{"metrics without a port", "[metrics]\naddress = \"127.0.0.1\"\n", false, nil},
		{"preferred snapshotter", "[snapshotter]\nmode = \"preferred\"\n", true, func(c Config) bool {
			return c.Snapshotter.Mode == "preferred" && c.Snapshotter.ControlAddress == "/run/weightsnap/control.sock"
		}},
		{"snapshotter mode disabled", "[snapshotter]\nmode = \"disabled\"\n", false, nil},
		{"no retry", "[snapshotter]\nretry_max_seconds = 0\n", false, nil},
		{"empty socket", "[snapshotter]\naddress = \"\"\n", false, nil},
		{"credential checks kept 300 s by default", "", true, func(c Config) bool { return c.CRI.CredentialTTL() == 300*time.Second }},
		{"credential checks at every pull", "[cri]\ncredential_seconds = 0\n", true, func(c Config) bool { return c.CRI.CredentialTTL() == 0 }},
		{"negative credential seconds", "[cri]\ncredential_seconds = -1\n", false, nil},
		{"wrong type", "[store]\nmax_store_bytes = \"big\"\n", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.name, []byte(tc.file))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !tc.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	if c, err := Load(""); err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("no file: %+v %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.toml")); err == nil {
		t.Fatal("a named missing file was accepted")
	}
	p := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(p, []byte("[store]\nvalidation = \"full_checksum\"\n"), 0o644)
	if c, err := Load(p); err != nil || c.Store.Validation != store.FullChecksum || c.Store.CoordinationTimeoutSeconds == 0 {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestDottedKeys(t *testing.T) {
	c, err := Parse("dotted", []byte("resolve.registries = [\"registry.example\"]\n"))
	if err != nil || !reflect.DeepEqual(c.Resolve.Registries, []string{"registry.example"}) || c.Resolve.Mode != "preferred" {
		t.Fatalf("%+v %v", c.Resolve, err)
	}
}

func TestUnknownKeysNamed(t *testing.T) {
	file := "root = \"/srv/ws\"\n[store]\nbogus = 1\nvalidation = \"full_checksum\"\n[resolve]\nplain_htp = true\n[nosuch]\nx = 1\n"
	_, err := Parse("c.toml", []byte(file))
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err %v, want invalid argument", err)
	}
	for _, want := range []string{"c.toml", "line 3: store.bogus", "line 6: resolve.plain_htp", "line 7: nosuch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "strict mode") {
		t.Errorf("%q speaks of the decoder's strict mode", err)
	}
	_, err = Parse("c.toml", []byte("[store]\nmax_store_bytes = \"big\"\n"))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a wrong type: %v, want its line", err)
	}
}

func TestPeerExposure(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("secret\n"), 0o600)
	for _, tc := range []struct {
		name string
		peer Peer
		ok   bool
	}{
		{"default", Default().Peer, true},
		{"loopback v6", Peer{Listen: "[::1]:7420"}, true},
		{"localhost", Peer{Listen: "localhost:7420"}, true},
		{"every interface", Peer{Listen: ":7420"}, false},
		{"a node address", Peer{Listen: "10.0.0.7:7420"}, false},
		{"a name", Peer{Listen: "node-a:7420"}, false},
		{"every interface with a token", Peer{Listen: ":7420", TokenFile: token}, true},
		{"every interface, allowed", Peer{Listen: "0.0.0.0:7420", AllowUnauthenticated: true}, true},
	} {
		_, err := tc.peer.ServerConfig()
		if tc.ok != (err == nil) || (err != nil && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "allow_unauthenticated"))) {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if want := !tc.ok || tc.peer.AllowUnauthenticated; tc.peer.Unauthenticated() != want {
			t.Errorf("%s: Unauthenticated() = %v, want %v", tc.name, !want, want)
		}
	}
}
