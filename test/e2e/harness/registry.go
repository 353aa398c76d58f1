package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"golang.org/x/crypto/bcrypt"
)

// Registry is a distribution registry serving plain HTTP (or HTTPS, see
// RegistryOptions) on 127.0.0.1, storing in its own directory.
type Registry struct {
	Addr string // listen address, 127.0.0.1:PORT
	Host string // the registry part of image references ("127.0.0.1:PORT"); same as Addr
	URL  string // http://127.0.0.1:PORT, or https://
	Dir  string
	Data string // where it stores its repositories and blobs
	Proc *Proc
	tls  bool
}

// RegistryOptions make a registry other than StartRegistry's.
type RegistryOptions struct {
	// Proxy makes it a pull-through cache of the registry at this URL
	// (distribution's proxy.remoteurl).
	Proxy string
	// CertFile and KeyFile make it serve HTTPS with this certificate;
	// ClientCAFile, when set, also requires a client certificate signed by
	// it (http.tls.clientcas).
	CertFile, KeyFile, ClientCAFile string
	// AccessLog logs every request to Proc.Log, with its user agent.
	AccessLog bool
	// User and Password, when set, make it require HTTP basic
	// authentication (distribution's htpasswd auth): /v2/ answers 401
	// without them.
	User, Password string
}

// Ref returns the reference of repo (with tag or digest) in this registry: Host + "/" + repo.
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// StartRegistry starts a registry on a free port and waits until /v2/ answers.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return StartRegistryWith(t, RegistryOptions{})
}

// StartAuthRegistry is StartRegistry of a registry that requires HTTP basic authentication
// as user with password.
func StartAuthRegistry(t testing.TB, user, password string) *Registry {
	t.Helper()
	return StartRegistryWith(t, RegistryOptions{User: user, Password: password})
}

// StartRegistryWith starts a registry as o says on a free port and waits
// until it answers.
func StartRegistryWith(t testing.TB, o RegistryOptions) *Registry {
	t.Helper()
	tools := Peers(t)
	dir := TempDir(t)
	extra := o.extra()
	if o.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.DefaultCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		writeFile(t, htpasswd, o.User+":"+string(hash)+"\n")
		extra += fmt.Sprintf("auth:\n  htpasswd:\n    realm: weightsnap-test\n    path: %s\n", htpasswd)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before the registry binds it
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		data := filepath.Join(dir, "data")
		cfg := writeRegistryConfig(t, dir, fmt.Sprintf("config-%d.yml", attempt), data, addr, !o.AccessLog, extra)
		p := StartProcess(t, dir, fmt.Sprintf("registry-%d", attempt),
			tools.pathEnv("OTEL_TRACES_EXPORTER=none"), tools.Registry, "serve", cfg)
		r := &Registry{Addr: addr, Host: addr, URL: "http://" + addr, Dir: dir, Data: data, Proc: p, tls: o.CertFile != ""}
		if r.tls {
			r.URL = "https://" + addr
		}
		if lastErr = r.waitReady(30*time.Second, r.answers(o.User != "")); lastErr == nil {
			return r
		}
		p.Stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, Tail(p.Log, 20))
	}
	t.Fatalf("registry did not start: %v", lastErr)
	return nil
}

// extra is the configuration o adds to http (TLS) and the file (proxy).
func (o RegistryOptions) extra() string {
	var b strings.Builder
	if o.CertFile != "" {
		fmt.Fprintf(&b, "  tls:\n    certificate: %s\n    key: %s\n", o.CertFile, o.KeyFile)
		if o.ClientCAFile != "" {
			fmt.Fprintf(&b, "    clientcas:\n      - %s\n", o.ClientCAFile)
		}
	}
	if o.Proxy != "" {
		fmt.Fprintf(&b, "proxy:\n  remoteurl: %s\n", o.Proxy)
	}
	return b.String()
}

// StartRegistryIn starts a registry inside ns, listening on addr (an address of ns, "10.233.x.y:PORT"),
// storing under data (a directory the caller made, a tmpfs for instance), and waits until /v2/ answers
// from inside ns.
func StartRegistryIn(t testing.TB, ns *NS, addr, data string) *Registry {
	t.Helper()
	tools := Peers(t)
	dir := TempDir(t)
	cfg := writeRegistryConfig(t, dir, "config.yml", data, addr, true, "")
	p := ns.Start(t, dir, "registry", "env", "OTEL_TRACES_EXPORTER=none", tools.Registry, "serve", cfg)
	r := &Registry{Addr: addr, Host: addr, URL: "http://" + addr, Dir: dir, Data: data, Proc: p}
	answers := func() bool {
		_, err := ns.Exec(tools.Busybox, "wget", "-q", "-O", "/dev/null", r.URL+"/v2/")
		return err == nil
	}
	if err := r.waitReady(30*time.Second, answers); err != nil {
		t.Fatalf("%v\n%s", err, Tail(p.Log, 20))
	}
	return r
}

// writeRegistryConfig writes dir/name, the configuration of a registry storing under data and
// listening on addr, with extra (TLS, proxy, auth) added, and returns its path.
func writeRegistryConfig(t testing.TB, dir, name, data, addr string, noAccessLog bool, extra string) string {
	t.Helper()
	cfg := filepath.Join(dir, name)
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: %t
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, noAccessLog, data, addr)+extra), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// answers is the readiness probe of a registry started from this process's namespace: /v2/
// answers 200 (or 401 with auth); an HTTPS registry, whose certificates are the test's, is
// ready once it listens.
func (r *Registry) answers(auth bool) func() bool {
	client := &http.Client{Timeout: 2 * time.Second}
	return func() bool {
		if r.tls {
			c, err := net.DialTimeout("tcp", r.Addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		resp, err := client.Get(r.URL + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK || auth && resp.StatusCode == http.StatusUnauthorized
	}
}

// waitReady waits until answers says yes, the registry exits, or timeout passes.
func (r *Registry) waitReady(timeout time.Duration, answers func() bool) error {
	return testenv.Wait(timeout, func() error {
		if r.Proc.Exited() {
			return testenv.Final(fmt.Errorf("registry exited: %v", r.Proc.Err()))
		}
		if !answers() {
			return fmt.Errorf("registry at %s: /v2/ did not answer", r.Addr)
		}
		return nil
	})
}

// Warm reads every file the registry stores into the page cache, so that it
// serves from memory, as a remote registry would, and not from the node's disk.
func (r *Registry) Warm() error {
	buf := make([]byte, 1<<20)
	return EachFile(r.Data, func(f *os.File) error {
		for {
			if _, err := f.Read(buf); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	})
}
