// Package harness runs weightsnap's end-to-end tests against real peers: containerd, runc, nerdctl,
// crictl, the oras CLI, a distribution registry, crane, the CNI plugins and a standalone kubelet
// (StartKubelet), all built at pinned versions by test/e2e/deps (run by `make e2e`, `make test` and
// .ci/run), plus network namespaces for multi-node tests.
//
// Every Start/New function takes a testing.TB and registers t.Cleanup teardown, so whatever a test
// started is stopped, unmounted and removed even when it fails. Each component runs in its own short
// directory under /tmp (unix socket paths must stay under 108 bytes) and writes its output to a log
// file there; when the test failed, the cleanup prints the tail of each log with t.Log. Set
// WEIGHTSNAP_E2E_LOGS=DIR to also keep copies of all logs in DIR.
//
// Typical use:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) } // runs the tests, then CheckNoLeaks
//
//	func TestRun(t *testing.T) {
//		reg := harness.StartRegistry(t)
//		ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg})
//		ref := harness.PushBusybox(t, reg)
//		out, err := ctd.Nerdctl("run", "--rm", "--net", "none",
//			"--security-opt", "seccomp=unconfined", ref, "echo", "hi")
//		...
//	}
//
// Locating the peers: WEIGHTSNAP_PEERS_BIN names the bin directory directly; otherwise the directory
// written by test/e2e/deps to ${WEIGHTSNAP_PEERS:-$HOME/.cache/weightsnap/peers}/current is used.
//
// Skips: a test whose peers are missing, or that needs root without it, is skipped with the reason
// (internal/testenv's Skip). With WEIGHTSNAP_REQUIRE_ALL=1 (set by .ci/run) every such skip is a
// failure instead, so CI cannot pass by skipping.
//
// Network namespaces (NetNS, Link) are named ws-*; give their interfaces addresses from
// 10.233.0.0/16 only, which this project reserves for its own test hosts inside those namespaces.
//
// Leaks: the harness records every process, directory and namespace it creates. CheckNoLeaks
// (called by Main after all tests) fails if any process is still alive, any mount under a harness
// directory remains, or a namespace or directory was left behind.
package harness
