package harness

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Registry is a distribution registry serving plain HTTP on 127.0.0.1, storing in its own directory.
type Registry struct {
	Addr string // listen address, 127.0.0.1:PORT
	Host string // the registry part of image references ("127.0.0.1:PORT"); same as Addr
	URL  string // http://127.0.0.1:PORT
	Dir  string
	Proc *Proc
}

// Ref returns the reference of repo (with tag or digest) in this registry: Host + "/" + repo.
func (r *Registry) Ref(repo string) string { return r.Host + "/" + repo }

// StartRegistry starts a registry on a free port and waits until /v2/ answers.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	tools := Peers(t)
	dir := TempDir(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before the registry binds it
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		cfg := writeRegistryConfig(t, dir, fmt.Sprintf("config-%d.yml", attempt), filepath.Join(dir, "data"), addr)
		p := StartProcess(t, dir, fmt.Sprintf("registry-%d", attempt),
			tools.pathEnv("OTEL_TRACES_EXPORTER=none"), tools.Registry, "serve", cfg)
		r := &Registry{Addr: addr, Host: addr, URL: "http://" + addr, Dir: dir, Proc: p}
		if lastErr = r.waitReady(30*time.Second, r.answers); lastErr == nil {
			return r
		}
		p.Stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, Tail(p.Log, 20))
	}
	t.Fatalf("registry did not start: %v", lastErr)
	return nil
}

// StartRegistryIn starts a registry inside ns, listening on addr (an address of ns, "10.233.x.y:PORT"),
// storing under data (a directory the caller made, a tmpfs for instance), and waits until /v2/ answers
// from inside ns.
func StartRegistryIn(t testing.TB, ns *NS, addr, data string) *Registry {
	t.Helper()
	tools := Peers(t)
	dir := TempDir(t)
	cfg := writeRegistryConfig(t, dir, "config.yml", data, addr)
	p := ns.Start(t, dir, "registry", "env", "OTEL_TRACES_EXPORTER=none", tools.Registry, "serve", cfg)
	r := &Registry{Addr: addr, Host: addr, URL: "http://" + addr, Dir: dir, Proc: p}
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
// listening on addr, and returns its path.
func writeRegistryConfig(t testing.TB, dir, name, data, addr string) string {
	t.Helper()
	cfg := filepath.Join(dir, name)
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, data, addr)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// answers reports whether the registry's /v2/ answers 200 (asked from this process's namespace).
func (r *Registry) answers() bool {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(r.URL + "/v2/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until answers says yes, the registry exits, or timeout passes.
func (r *Registry) waitReady(timeout time.Duration, answers func() bool) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if r.Proc.Exited() {
			return fmt.Errorf("registry exited: %v", r.Proc.Err())
		}
		if answers() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("registry at %s: /v2/ did not answer within %v", r.Addr, timeout)
}
