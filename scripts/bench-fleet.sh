#!/usr/bin/env bash
# Fleet benchmark: N nodes (network namespaces on one bridge, stores on tmpfs, every link
# shaped with tc to one rate) resolve the same artifact from an origin registry at the same instant,
# each with the other nodes as its weight peers; beside it, in the same run, the same nodes pulling
# from the registry only, and one node alone on the same links (and unshaped, the machine's own
# bound). The table: origin egress in copies of the artifact (the origin interface's counters), the
# nodes' times to READY as p50 and p99, the first and the last (the max) READY, and the last over
# one node alone, and the CPU seconds the nodes spent per node per MiB; every node passes verify
# --full. Each row is the median [min-max] of BENCH_REPS rounds up to BENCH_FLEET_REPS_NODES nodes
# (default 4; the forest's 0, its rounds take minutes), of one round past them (its rounds column
# says which).
# Real registry (test/e2e/deps), bin/weightsnap; needs root, tc and flock.
# The driver is TestFleetBench in test/fleet/bench_test.go (build tag bench).
#
# Usage: scripts/bench-fleet.sh [N...]   (default 2 4 8 16; the forest's 2 4 8 16 32 64)
#        BENCH_FLEET_STRUCTURE=forest scripts/bench-fleet.sh      (the striped forest up to 64 nodes,
#            with one killed mid-transfer at 64: docs/fleet.md)
# Env:   BENCH_FLEET_STRUCTURE  the fleet rounds' [peer] structure: chain (default) or forest
#        BENCH_FLEET_SIZE       the artifact's size (default 256MiB; the forest's 192MiB)
#        BENCH_FLEET_RATE_MBIT  every link's rate (default 100; the forest's 10: bench_test.go says why)
#        BENCH_FLEET_ORIGIN_RATE_MBIT  the origin's link alone (default BENCH_FLEET_RATE_MBIT): a
#                               registry slower than the nodes' links leaves the relays spare rate
#        BENCH_FLEET_CC         the origin's and the nodes' TCP congestion control (default cubic,
#                               Linux's; a namespace would otherwise take the host's)
#        BENCH_FLEET_REGISTRY   0 leaves out the registry-only rounds (N copies over the origin's
#                               link each), 1 keeps them (default 1; the forest's 0)
#        BENCH_FLEET_KILL       1 adds, at the largest N, a fleet round with one node killed
#                               mid-transfer (default 0; the forest's 1)
#        BENCH_REPS             the rounds of one node alone and of each row up to
#                               BENCH_FLEET_REPS_NODES nodes (default 5, and 4 nodes; the forest's 0)
#        BENCH_FLEET_GOMAXPROCS the nodes' GOMAXPROCS (default unset; the forest's 1)
#        BENCH_OUT              also write the table to this file
#        BENCH_FLEET_JSON       also write each fleet row's median round's nodes (times to READY,
#                               sources) and the structure as JSON to this file
#                               (test/fleet/sim/testdata/measured.json is one)
set -euo pipefail
if [ -n "${BENCH_FLEET_JSON:-}" ]; then
	BENCH_FLEET_JSON=$(realpath -m "$BENCH_FLEET_JSON") # the test runs in test/fleet
	export BENCH_FLEET_JSON
fi
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench-fleet: needs root (network namespaces, tc, tmpfs); skipped" >&2
	exit 0
fi
default_nodes="2 4 8 16"
default_size=256MiB
if [ "${BENCH_FLEET_STRUCTURE:-}" = forest ]; then
	default_nodes="2 4 8 16 32 64"
	default_size=192MiB
fi
export BENCH_FLEET_NODES="${*:-$default_nodes}"
export WEIGHTSNAP_PEERS_BIN=${WEIGHTSNAP_PEERS_BIN:-$(test/e2e/deps -q | tail -n 1)}
go build -o bin/ ./cmd/...
log=$(mktemp /tmp/bench-fleet.XXXXXX.log)
echo "bench-fleet: nodes $BENCH_FLEET_NODES, ${BENCH_FLEET_SIZE:-$default_size}, structure ${BENCH_FLEET_STRUCTURE:-chain}; log in $log" >&2
if ! go test -tags bench -count=1 -timeout 120m -v -run '^TestFleetBench$' ./test/fleet/ >"$log" 2>&1; then
	tail -n 60 "$log" >&2
	exit 1
fi
awk '/^weightsnap fleet benchmark/ { p = 1 } p && /^(--- |PASS|ok )/ { exit } p' "$log" | tee ${BENCH_OUT:+"$BENCH_OUT"}
rm -f "$log"
