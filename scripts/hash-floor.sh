#!/usr/bin/env bash
# Prints this machine's hashing floor as "SHA256 BLAKE3 CORES SHA256_MIN SHA256_MAX BLAKE3_MIN
# BLAKE3_MAX": the CPU seconds one core spends per GiB on sha256 and on BLAKE3 (the store's own
# implementations; artifact.BenchmarkHashFloor), each the median of BENCH_REPS runs (default 5)
# with its min and max, and the core count.
# A command's floor is its bytes times the cost of the hashes it must
# compute, over all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkHashFloor$' -benchtime 1x -count "${BENCH_REPS:-5}" ./artifact/ |
	awk '/^BenchmarkHashFloor/ { n++; for (i = 1; i <= NF; i++) { if ($(i+1) == "sha256-cpu-s/GiB") s[n] = $i; if ($(i+1) == "blake3-cpu-s/GiB") b[n] = $i; if ($(i+1) == "cores") c = $i } }
	     function sort(v,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t } }
	     function med(v) { return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
	     END { if (n == 0) exit 1; sort(s); sort(b); printf "%.3f %.3f %d %.3f %.3f %.3f %.3f\n", med(s), med(b), c, s[1], s[n], b[1], b[n] }'
