#!/usr/bin/env bash
# Prints this machine's hashing floor as "SHA256 BLAKE3 CORES": the CPU
# seconds one core spends per GiB on sha256 and on BLAKE3 (the store's own
# implementations; artifact.BenchmarkHashFloor), and the core count.
# A command's floor is its bytes times the cost of the hashes it must
# compute, over all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkHashFloor$' -benchtime 2x ./artifact/ |
	awk '/^BenchmarkHashFloor/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "sha256-cpu-s/GiB") s = $i; if ($(i+1) == "blake3-cpu-s/GiB") b = $i; if ($(i+1) == "cores") c = $i } }
	     END { if (s == "" || b == "") exit 1; printf "%s %s %d\n", s, b, c }'
