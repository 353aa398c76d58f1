package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// The registry host directory end-to-end tests: a
// hosts.toml in containerd's layout decides which hosts weightsnap reaches a
// registry at, with which certificates.

// TestHostsMirror: a pull-through cache listed first in hosts.toml serves
// every blob of a weightsnap pull and of weightsnapd's (it fetched them from
// the origin; the origin serves weightsnap none); with the mirror stopped
// the origin serves.
func TestHostsMirror(t *testing.T) {
	harness.Peers(t)
	origin := harness.StartRegistryWith(t, harness.RegistryOptions{AccessLog: true})
	mirror := harness.StartRegistryWith(t, harness.RegistryOptions{AccessLog: true, Proxy: origin.URL})
	ckpt, src, id := ociCheckpoint(t, "16MiB", 2)
	hosts := hostsDir(t, origin.Host, fmt.Sprintf(`server = %q
[host.%q]
  capabilities = ["pull", "resolve"]
`, origin.URL, mirror.URL))
	ref := origin.Ref("models/mirror:v1")
	wsOK(t, src, "push", "--hosts-dir", hosts, id, ref) // the server is the one push host
	layers := manifestLayers(t, origin.URL+"/v2/models/mirror/manifests/v1")

	var rep pullReport
	if err := json.Unmarshal([]byte(wsOK(t, filepath.Join(t.TempDir(), "store"), "pull", "--json", "--hosts-dir", hosts, ref)), &rep); err != nil || !rep.Built || !strings.HasSuffix(rep.Identity, id) {
		t.Fatalf("pull through the mirror: %v %+v", err, rep)
	}
	fromMirror, fromOrigin := blobGETs(t, mirror.Proc.Log), blobGETs(t, origin.Proc.Log)
	for _, l := range layers {
		if !fromMirror[l] {
			t.Errorf("the mirror did not serve layer %s to weightsnap (it served %v)", l, fromMirror)
		}
	}
	if len(fromOrigin) != 0 {
		t.Errorf("the origin served weightsnap blobs %v; the mirror should have", fromOrigin)
	}
	proxied := proxiedBlobs(t, origin.Proc.Log)
	if len(proxied) == 0 {
		t.Errorf("the origin's log shows no blob fetched by the mirror:\n%s", harness.Tail(origin.Proc.Log, 20))
	}
	t.Logf("%d layers; the mirror served weightsnap %d blobs, fetched %d from the origin", len(layers), len(fromMirror), len(proxied))

	// The daemon, with [resolve] registry_config_path, pulls through the mirror too.
	d := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{Registries: []string{origin.Host}, RegistryConfigPath: hosts})
	dir := filepath.Join(harness.TempDir(t), "models", "m")
	if r := wsWith(t, d.Config, "mount", ref, dir); r.code != 0 {
		t.Fatalf("mount through weightsnapd: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	sameFiles(t, ckpt, dir)
	wsWith(t, d.Config, "umount", dir)
	toDaemon := blobsServed(t, mirror.Proc.Log, func(agent string) bool { return agent == "weightsnapd" })
	for _, l := range layers {
		if !toDaemon[l] {
			t.Errorf("the mirror did not serve layer %s to weightsnapd (it served %v)", l, toDaemon)
		}
	}
	if fromOrigin := blobGETs(t, origin.Proc.Log); len(fromOrigin) != 0 {
		t.Errorf("the origin served blobs %v to weightsnap or weightsnapd", fromOrigin)
	}

	mirror.Proc.Stop()
	if err := json.Unmarshal([]byte(wsOK(t, filepath.Join(t.TempDir(), "store"), "pull", "--json", "--hosts-dir", hosts, ref)), &rep); err != nil || !rep.Built {
		t.Fatalf("pull with the mirror stopped: %v %+v", err, rep)
	}
	fromOrigin = blobGETs(t, origin.Proc.Log)
	for _, l := range layers {
		if !fromOrigin[l] {
			t.Errorf("with the mirror stopped, the origin did not serve layer %s", l)
		}
	}
}

// TestHostsMirrorPrepare: a cold Prepare of a weight image's pointer
// layer, by weightsnapd with [resolve] registry_config_path, fetches every
// blob of the artifact through the mirror; the origin serves the daemon
// none.
func TestHostsMirrorPrepare(t *testing.T) {
	harness.Peers(t)
	origin := harness.StartRegistryWith(t, harness.RegistryOptions{AccessLog: true})
	mirror := harness.StartRegistryWith(t, harness.RegistryOptions{AccessLog: true, Proxy: origin.URL})
	hosts := hostsDir(t, origin.Host, fmt.Sprintf(`server = %q
[host.%q]
  capabilities = ["pull", "resolve"]
`, origin.URL, mirror.URL))
	n := &snapNode{reg: origin}
	n.ws = harness.StartWeightsnapd(t, harness.WeightsnapdOptions{Registries: []string{origin.Host}, RegistryConfigPath: hosts})
	n.ctd = harness.StartContainerd(t, harness.ContainerdOptions{Registry: origin, Imports: []string{n.ws.ContainerdSnippetFile(t, "weightsnap.toml")}})
	n.base = harness.PushBusybox(t, origin)
	w := n.pushWeightImage(t, "cold", "8MiB", 2, "/models/x")
	out, err := n.run(w.ref, "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	for path, sum := range w.files {
		if !strings.Contains(out, sum+"  "+path) {
			t.Errorf("the container does not see %s with sha256 %s:\n%s", path, sum, out)
		}
	}
	toDaemon := blobsServed(t, mirror.Proc.Log, func(agent string) bool { return agent == "weightsnapd" })
	for _, l := range manifestLayers(t, origin.URL+"/v2/models/cold/manifests/v1") {
		if !toDaemon[l] {
			t.Errorf("the mirror did not serve layer %s to weightsnapd (it served %v)", l, toDaemon)
		}
	}
	if direct := blobsServed(t, origin.Proc.Log, func(agent string) bool { return agent == "weightsnapd" }); len(direct) != 0 {
		t.Errorf("the origin served weightsnapd blobs %v; the mirror should have", direct)
	}
}

// TestHostsTLS: an HTTPS registry with its own CA that requires a client
// certificate, both named only in hosts.toml, takes a push and serves a
// pull without --insecure or plain_http; without the directory it is
// refused.
func TestHostsTLS(t *testing.T) {
	harness.Peers(t)
	pki := newTestPKI(t)
	reg := harness.StartRegistryWith(t, harness.RegistryOptions{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.ca})
	hosts := hostsDir(t, reg.Host, fmt.Sprintf(`server = %q
ca = %q
client = [[%q, %q]]
`, reg.URL, pki.ca, pki.clientCert, pki.clientKey))
	_, src, id := ociCheckpoint(t, "8MiB", 2)
	ref := reg.Ref("models/tls:v1")
	if r := ws(t, src, "push", "--hosts-dir", "", id, ref); r.code == 0 {
		t.Fatalf("push without the registry host directory trusted the test CA:\n%s", r.out)
	}
	wsOK(t, src, "push", "--hosts-dir", hosts, id, ref)
	var rep pullReport
	if err := json.Unmarshal([]byte(wsOK(t, filepath.Join(t.TempDir(), "store"), "pull", "--json", "--hosts-dir", hosts, ref)), &rep); err != nil || !rep.Built || !strings.HasSuffix(rep.Identity, id) {
		t.Fatalf("pull: %v %+v", err, rep)
	}
}

// hostsDir writes a registry host directory with host's hosts.toml.
func hostsDir(t *testing.T, host, toml string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strings.Replace(host, ":", "_", 1)+"_")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// manifestLayers are the layer digests of the manifest at url.
func manifestLayers(t *testing.T, url string) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Layers) == 0 {
		t.Fatalf("manifest at %s: %v %+v", url, err, m)
	}
	var out []string
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// blobGETRE is an access log line of a blob GET answered 200 or 206.
var blobGETRE = regexp.MustCompile(`"GET /v2/[^ ]*/blobs/(sha256:[0-9a-f]{64})[^ ]* HTTP/[0-9.]+" 20[06] .*"([^"]*)"\s*$`)

// blobGETs are the blobs a registry's access log shows served to weightsnap.
func blobGETs(t *testing.T, log string) map[string]bool {
	return blobsServed(t, log, func(agent string) bool { return strings.HasPrefix(agent, "weightsnap") })
}

// proxiedBlobs are the blobs a registry's access log shows served to
// another client than weightsnap (a pull-through cache).
func proxiedBlobs(t *testing.T, log string) map[string]bool {
	return blobsServed(t, log, func(agent string) bool { return !strings.HasPrefix(agent, "weightsnap") })
}

func blobsServed(t *testing.T, log string, agent func(string) bool) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if m := blobGETRE.FindStringSubmatch(line); m != nil && agent(m[2]) {
			out[m[1]] = true
		}
	}
	return out
}

// testPKI is a CA and a server (127.0.0.1) and a client certificate it
// signed, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weightsnap test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certPath, keyPath string) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "PRIVATE KEY", kder)
	}
	p := testPKI{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return p
}
