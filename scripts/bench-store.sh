#!/usr/bin/env bash
# Store benchmark, side by side in one run on the same files and disk:
#   the hashing floor of this machine (scripts/hash-floor.sh), then
#   import (cold fingerprint, fsynced) vs cp -r + sync and vs its floor (sha256 + BLAKE3 of every byte),
#   verify --full vs its floor (BLAKE3 of every byte), beside b3sum and sha256sum,
#   peak RSS of import and verify;
#   each the median of REPS runs, import and cp -r + sync taking turns.
# Usage: scripts/bench-store.sh [SIZE] [SHARDS] [REPS]   (default 2GiB, 8, 5; REPS odd, at most 9)
# Env:   DROP_CACHES=1  empty the page cache before each contender, then warm its source (root only)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
size=${1:-2GiB}
shards=${2:-8}
reps=${3:-5}
case $reps in 1 | 3 | 5 | 7 | 9) ;; *) echo "bench-store: REPS must be odd, 1 to 9 (got $reps)" >&2; exit 2 ;; esac
mid=$(((reps + 1) / 2)) # the median's line among reps sorted runs
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
read -r floor_sha floor_b3 cores < <(scripts/hash-floor.sh)
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
# timed OUT CMD...: runs CMD, leaving "seconds CPU-seconds peak-RSS-KiB" in OUT
timed() {
	local out=$1; shift
	/usr/bin/time -f "%e %U %S %M" -o "$out.raw" "$@" >/dev/null 2>&1
	awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$out.raw" >"$out"
}

# import into an empty store and cp -r + sync, taking turns, the median of the runs of each (as for
# verify below): the seconds, the CPU-s of the median import, and the peak RSS of all of them. The
# host's disk is shared: cp -r + sync took 1.34, 4.40 and 3.63 s in the three turns of one run.
export WEIGHTSNAP_ROOT="$work/store"
runs_cp=()
for i in $(seq "$reps"); do
	warm "$work/src"/*
	runs_cp+=("$(secs bash -c "cp -r '$work/src' '$work/cp' && sync")")
	rm -rf "$work/cp"
	chmod -R u+w "$work/store" 2>/dev/null || true
	rm -rf "$work/store"
	"$ws" store init >/dev/null
	warm "$work/src"/*
	timed "$work/import$i.time" "$ws" import "$work/src" --revision "$rev"
done
t_cp=$(printf '%s\n' "${runs_cp[@]}" | median)
read -r t_import c_import _ < <(sort -g "$work"/import?.time | sed -n "${mid}p")
rss_import=$(cut -d' ' -f3 "$work"/import?.time | sort -n | tail -n 1)
runs_import=$(cut -d' ' -f1 "$work"/import?.time | tr '\n' ' ')
id=$("$ws" import "$work/src" --revision "$rev")
t_warm=$(secs "$ws" import "$work/src" --revision "$rev")
files=("$work/store/artifacts/${id#sha256:}"/*)
warm "${files[@]}"
# verify, the median of the runs (as the other benches take medians; this machine's host noise
# moves a single 0.4 s run by 30%): its seconds, the CPU-s of that run, and the peak RSS of all.
for i in $(seq "$reps"); do
	timed "$work/verify$i.time" "$ws" verify --full "$id"
done
read -r t_verify c_verify _ < <(sort -g "$work"/verify?.time | sed -n "${mid}p")
rss_verify=$(cut -d' ' -f3 "$work"/verify?.time | sort -n | tail -n 1)
runs_verify=$(cut -d' ' -f1 "$work"/verify?.time | tr '\n' ' ')
t_b3=$(for i in $(seq "$reps"); do secs b3sum "${files[@]}"; echo; done | median)
t_sha=$(secs sha256sum "${files[@]}")

# floor CPU-S-PER-GIB: the wall-clock floor of hashing every byte over all cores
floor() { awk -v b="$bytes" -v c="$1" -v n="$cores" 'BEGIN { printf "%.2f", b / 2^30 * c / n }'; }
# cpufloor CPU-S-PER-GIB: the CPU seconds of hashing every byte
cpufloor() { awk -v b="$bytes" -v c="$1" 'BEGIN { printf "%.2f", b / 2^30 * c }'; }
f_import=$(floor "$(echo "$floor_sha + $floor_b3" | bc -l)")
f_verify=$(floor "$floor_b3")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
maxof() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
met() { awk -v r="$1" -v g="$2" 'BEGIN { print (r <= g) ? "yes" : "NO" }'; }
r_import=$(ratio "$t_import" "$(maxof "$t_cp" "$f_import")")
r_verify=$(ratio "$t_verify" "$f_verify")
mib() { echo $(($1 / 1024)); }

printf '\nweightsnap store benchmark: %s (%d bytes) in %s shards, %s cores, %s\n' "$size" "$bytes" "$shards" "$cores" "$(stat -f -c %T "$work")"
printf 'hashing floor: sha256 %.3f CPU-s/GiB, BLAKE3 %.3f CPU-s/GiB (per core, all %s cores hashing; floors below are over all cores)\n' "$floor_sha" "$floor_b3" "$cores"
printf '%-36s %8s %8s %7s %-30s %4s %8s %8s\n' "measure" "seconds" "floor" "ratio" "goal" "met" "CPU-s" "RSS MiB"
printf '%-36s %8.2f %8s %7s %-30s %4s %8s %8s\n' "cp -r + sync" "$t_cp" "" "" "" "" "" ""
printf '%-36s %8.2f %8s %7s %-30s %4s %8s %8d\n' "weightsnap import (cold, fsynced)" "$t_import" "$f_import" "$r_import" "<= 1.2 x max(cp+sync, floor)" "$(met "$r_import" 1.2)" "$c_import/$(cpufloor "$(echo "$floor_sha + $floor_b3" | bc -l)")" "$(mib "$rss_import")"
printf '%-36s %8.3f %8s %7s %-30s %4s %8s %8s\n' "weightsnap import again (warm hit)" "$t_warm" "" "" "no source byte read" "" "" ""
printf '%-36s %8.2f %8s %7s %-30s %4s %8s %8d\n' "weightsnap verify --full (warm)" "$t_verify" "$f_verify" "$r_verify" "<= 1.1 x floor" "$(met "$r_verify" 1.1)" "$c_verify/$(cpufloor "$floor_b3")" "$(mib "$rss_verify")"
printf '%-36s %8.2f %8s %7s %-30s %4s %8s %8s\n' "b3sum (warm, all threads)" "$t_b3" "" "$(ratio "$t_verify" "$t_b3")" "verify / b3sum" "" "" ""
printf '%-36s %8.2f %8s %7s %-30s %4s %8s %8s\n' "sha256sum (warm, one thread)" "$t_sha" "" "$(ratio "$t_verify" "$t_sha")" "verify / sha256sum" "" "" ""
printf 'CPU-s: CPU seconds used / CPU seconds of its hashes at the floor (noise from other load shows in seconds more than in CPU-s)\n'
printf 'import, cp -r + sync, verify and b3sum: medians of %s; runs (s): import %s| cp -r + sync %s | verify %s\n' "$reps" "$runs_import" "${runs_cp[*]}" "$runs_verify"
printf 'peak RSS goal: each < 128 MiB: import %s, verify %s\n' \
	"$(awk -v k="$rss_import" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')" "$(awk -v k="$rss_verify" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')"
