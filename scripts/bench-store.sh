#!/usr/bin/env bash
# Store benchmark, side by side in one run on the same files and disk:
#   the hashing floor of this machine (scripts/hash-floor.sh), then
#   import (cold fingerprint, fsynced) vs cp -r + sync and vs its floor (sha256 + BLAKE3 of every byte),
#   verify --full vs its floor (BLAKE3 of every byte), beside b3sum and sha256sum,
#   peak RSS of import and verify;
#   the disk's floor: the same bytes written to one file and synced;
#   each the median of REPS runs with its min and max (scripts/bench-lib.sh: mmm, ratio), import and
#   cp -r + sync taking turns.
# Usage: scripts/bench-store.sh [SIZE] [SHARDS] [REPS]   (default 2GiB, 8, BENCH_REPS or 5)
# Env:   DROP_CACHES=1  empty the page cache before each contender, then warm its source (root only)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
size=${1:-2GiB}
shards=${2:-8}
reps=${3:-$BENCH_REPS}
ws=$PWD/bin/weightsnap
for tool in b3sum /usr/bin/time bc; do
	if ! command -v "$tool" >/dev/null; then
		if [ "$(id -u)" = 0 ]; then
			apt-get install -y -qq b3sum time bc >/dev/null
		else
			echo "bench-store: $tool missing (apt-get install b3sum time bc)" >&2
			exit 1
		fi
	fi
done
hash_floor
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-bench.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
rev=0123456789abcdef0123456789abcdef01234567

$ws dev synth --out "$work/src" --size "$size" --shards "$shards" --dtype BF16 --seed 3 >/dev/null 2>&1
bytes=$(du -sb "$work/src" | cut -f1)
# warm FILE...: settle, then read FILE... into the page cache: every contender starts with its source warm.
warm() {
	settle
	cat "$@" >/dev/null
}
# timed CMD...: runs CMD, printing "seconds CPU-seconds peak-RSS-KiB"
timed() {
	/usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" >/dev/null 2>&1
	awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$work/time"
}

# import into an empty store and cp -r + sync, taking turns, and the disk's floor: the seconds,
# CPU-s and peak RSS of each run.
export WEIGHTSNAP_ROOT="$work/store"
runs_cp=() runs_disk=() runs_import=() cpu_import=() rss_import=0
for i in $(seq "$reps"); do
	runs_disk+=("$(disk_floor "$work" "$work/src"/*)")
	warm "$work/src"/*
	runs_cp+=("$(secs bash -c "cp -r '$work/src' '$work/cp' && sync")")
	rm -rf "$work/cp"
	chmod -R u+w "$work/store" 2>/dev/null || true
	rm -rf "$work/store"
	"$ws" store init >/dev/null
	warm "$work/src"/*
	read -r t c r < <(timed "$ws" import "$work/src" --revision "$rev")
	runs_import+=("$t") cpu_import+=("$c") rss_import=$((r > rss_import ? r : rss_import))
done
id=$("$ws" import "$work/src" --revision "$rev")
runs_warm=()
for i in $(seq "$reps"); do runs_warm+=("$(secs "$ws" import "$work/src" --revision "$rev")"); done
files=("$work/store/artifacts/${id#sha256:}"/*)
warm "${files[@]}"
# verify, b3sum and sha256sum, warm, taking turns
runs_verify=() cpu_verify=() rss_verify=0 runs_b3=() runs_sha=()
for i in $(seq "$reps"); do
	read -r t c r < <(timed "$ws" verify --full "$id")
	runs_verify+=("$t") cpu_verify+=("$c") rss_verify=$((r > rss_verify ? r : rss_verify))
	runs_b3+=("$(secs b3sum "${files[@]}")")
	runs_sha+=("$(secs sha256sum "${files[@]}")")
done
m() { printf '%s\n' "$@" | median; } # m VALUES...: their median

# floor CPU-S-PER-GIB: the wall-clock floor of hashing every byte over all cores
floor() { awk -v b="$bytes" -v c="$1" -v n="$cores" 'BEGIN { printf "%.2f", b / 2^30 * c / n }'; }
# cpufloor CPU-S-PER-GIB: the CPU seconds of hashing every byte
cpufloor() { awk -v b="$bytes" -v c="$1" 'BEGIN { printf "%.2f", b / 2^30 * c }'; }
f_import=$(floor "$(echo "$floor_sha + $floor_b3" | bc -l)")
f_verify=$(floor "$floor_b3")
maxof() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
met() { awk -v r="$1" -v g="$2" 'BEGIN { print (r <= g) ? "yes" : "NO" }'; }
maxof() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
met() { awk -v r="$1" -v g="$2" 'BEGIN { print (r <= g) ? "yes" : "NO" }'; }
# over VALUES... FLOOR: each of VALUES over FLOOR
over() { local f=${*: -1}; for v in "${@:1:$#-1}"; do awk -v v="$v" -v f="$f" 'BEGIN { printf "%.3f\n", v / f }'; done; }
ref_import=$(maxof "$(m "${runs_cp[@]}")" "$f_import")
mapfile -t r_import < <(over "${runs_import[@]}" "$ref_import")
mapfile -t r_verify < <(over "${runs_verify[@]}" "$f_verify")
mib() { echo $(($1 / 1024)); }

printf '\nweightsnap store benchmark: %s (%d bytes) in %s shards, %s cores, %s\n' "$size" "$bytes" "$shards" "$cores" "$(stat -f -c %T "$work")"
printf 'every figure: median [min-max] of %s runs; floors below are over all cores; ratio: over the row'"'"'s reference, median [worst-best]\n' "$reps"
printf '%s\n' "$floor_line"
printf 'disk floor (the same bytes written to one file and synced): %s s\n' "$(mmm "${runs_disk[@]}")"
row() { printf '%-36s %20s %6s %22s %-28s %4s %20s %8s\n' "$@"; }
row "measure" "seconds" "floor" "ratio" "goal" "met" "CPU-s" "RSS MiB"
row "cp -r + sync" "$(mmm "${runs_cp[@]}")" "" "$(ratio "${runs_cp[*]}" "${runs_disk[*]}")" "(over the disk floor)" "" "" ""
row "weightsnap import (cold, fsynced)" "$(mmm "${runs_import[@]}")" "$f_import" "$(mmm "${r_import[@]}")x" "<= 1.2 x max(cp+sync, floor)" "$(met "$(m "${r_import[@]}")" 1.2)" "$(mmm "${cpu_import[@]}")" "$(mib "$rss_import")"
row "weightsnap import over the disk floor" "" "" "$(ratio "${runs_import[*]}" "${runs_disk[*]}")" "" "" "" ""
row "weightsnap import again (warm hit)" "$(PREC=3 mmm "${runs_warm[@]}")" "" "" "no source byte read" "" "" ""
row "weightsnap verify --full (warm)" "$(mmm "${runs_verify[@]}")" "$f_verify" "$(mmm "${r_verify[@]}")x" "<= 1.1 x floor" "$(met "$(m "${r_verify[@]}")" 1.1)" "$(mmm "${cpu_verify[@]}")" "$(mib "$rss_verify")"
row "b3sum (warm, all threads)" "$(mmm "${runs_b3[@]}")" "" "$(ratio "${runs_b3[*]}" "${runs_verify[*]}")" "b3sum / verify" "" "" ""
row "sha256sum (warm, one thread)" "$(mmm "${runs_sha[@]}")" "" "$(ratio "${runs_sha[*]}" "${runs_verify[*]}")" "sha256sum / verify" "" "" ""
printf 'import CPU-s / its hashes at the floor: %s / %s; verify: %s / %s (noise from other load shows in seconds more than in CPU-s)\n' \
	"$(m "${cpu_import[@]}")" "$(cpufloor "$(echo "$floor_sha + $floor_b3" | bc -l)")" "$(m "${cpu_verify[@]}")" "$(cpufloor "$floor_b3")"
printf 'runs (s): import %s | cp -r + sync %s | verify %s | disk %s\n' "${runs_import[*]}" "${runs_cp[*]}" "${runs_verify[*]}" "${runs_disk[*]}"
printf 'peak RSS goal: each < 128 MiB: import %s, verify %s\n' \
	"$(awk -v k="$rss_import" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')" "$(awk -v k="$rss_verify" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')"
