#!/usr/bin/env bash
# The Go benchmarks (go test -bench) of PACKAGES (default ./...), each run BENCH_REPS times (5 by
# default) at -benchtime BENCHTIME (default 3x), summarised as one line per benchmark: every figure
# it reports (ns/op, MB/s, B/op, allocs/op, its own units) as the median of the runs with the min and
# max, and "spread" with max over min where the ns/op spread more than 1.3x. Lines of a failing
# benchmark or package pass through, and the script fails with go test.
#
#	scripts/bench-go.sh [PACKAGES...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
GO=${GO:-go}
[ $# -gt 0 ] || set -- ./...

echo "go test -bench: median [min-max] of $BENCH_REPS runs (-count $BENCH_REPS -benchtime ${BENCHTIME:-3x}) per figure"
set -o pipefail
"$GO" test -run '^$' -bench . -benchtime "${BENCHTIME:-3x}" -count "$BENCH_REPS" "$@" 2>&1 | awk -f scripts/bench-go.awk
