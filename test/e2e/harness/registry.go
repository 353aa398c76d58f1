package harness

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
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
	return startRegistry(t, TempDir(t), "")
}

// StartAuthRegistry is StartRegistry of a registry that requires HTTP basic authentication
// (distribution's htpasswd auth) as user with password; /v2/ answers 401 without them.
func StartAuthRegistry(t testing.TB, user, password string) *Registry {
	t.Helper()
	dir := TempDir(t)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	writeFile(t, htpasswd, user+":"+string(hash)+"\n")
	return startRegistry(t, dir, fmt.Sprintf("auth:\n  htpasswd:\n    realm: weightsnap-test\n    path: %s\n", htpasswd))
}

// startRegistry starts a registry in dir with the auth section authYAML ("" for none).
func startRegistry(t testing.TB, dir, authYAML string) *Registry {
	t.Helper()
	tools := Peers(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before the registry binds it
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		cfg := filepath.Join(dir, fmt.Sprintf("config-%d.yml", attempt))
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
%s`, filepath.Join(dir, "data"), addr, authYAML)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		p := StartProcess(t, dir, fmt.Sprintf("registry-%d", attempt),
			tools.pathEnv("OTEL_TRACES_EXPORTER=none"), tools.Registry, "serve", cfg)
		r := &Registry{Addr: addr, Host: addr, URL: "http://" + addr, Dir: dir, Proc: p}
		if lastErr = r.waitReady(30*time.Second, authYAML != ""); lastErr == nil {
			return r
		}
		p.Stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, Tail(p.Log, 20))
	}
	t.Fatalf("registry did not start: %v", lastErr)
	return nil
}

// waitReady waits until /v2/ answers 200, or 401 for a registry with authentication.
func (r *Registry) waitReady(timeout time.Duration, auth bool) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if r.Proc.Exited() {
			return fmt.Errorf("registry exited: %v", r.Proc.Err())
		}
		resp, err := client.Get(r.URL + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || auth && resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("registry at %s: /v2/ did not answer within %v", r.Addr, timeout)
}
