#!/usr/bin/env bash
# Snapshotter benchmark (issues 9 and 34): a container's start to the first weight byte read in it,
# side by side in one run on one machine and one local registry, by `nerdctl run` and by `ctr run`:
#   weightsnap                     (a weight image; weightsnapd pulls the artifact during Prepare)
#   containerd's overlayfs         (busybox and the same files as one uncompressed tar layer)
#   containerd's erofs             (the same image; its erofs differ converts the layer; ctr only)
# for each size, each (a) cold (nothing on the node), (b) a second image of the same weights, (c) warm
# (the same image again), with the bytes the node wrote to disk during each. Real containerd,
# nerdctl, ctr, registry, mkfs.erofs (test/e2e/deps) and bin/weightsnapd; needs root.
# The driver is TestSnapshotterBench in test/e2e/snapshotter_bench_test.go (build tag bench).
#
# Usage: scripts/bench-snapshotter.sh [SIZE...]   (default 2GiB 4GiB)
# Env:   BENCH_REPS  runs per case, the table shows medians with min and max (default 5)
#        BENCH_OUT   also write the table to this file
#        DROP_CACHES=1  empty the page cache before every run
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench-snapshotter: needs root (containerd and mounts); skipped" >&2
	exit 0
fi
export BENCH_SIZES="${*:-2GiB 4GiB}"
export WEIGHTSNAP_PEERS_BIN=${WEIGHTSNAP_PEERS_BIN:-$(test/e2e/deps -q | tail -n 1)}
go build -o bin/ ./cmd/...
log=$(mktemp /tmp/bench-snapshotter.XXXXXX.log)
echo "bench-snapshotter: sizes $BENCH_SIZES, ${BENCH_REPS:-5} runs each; log in $log" >&2
if ! go test -tags bench -count=1 -timeout 120m -v -run '^TestSnapshotterBench$' ./test/e2e/ >"$log" 2>&1; then
	tail -n 60 "$log" >&2
	exit 1
fi
awk '/^weightsnap snapshotter benchmark/ { p = 1 } p && /^(--- |PASS|ok )/ { exit } p' "$log"
rm -f "$log"
