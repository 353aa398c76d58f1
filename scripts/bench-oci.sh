#!/usr/bin/env bash
# OCI benchmark, side by side in one run on the same artifact and the same local registry:
#   the hashing floor of this machine (scripts/hash-floor.sh) and the pull's floor (sha256 of every byte),
#   the disk's floor (the same bytes written to one file and synced), each round
#   weightsnap pull (every blob sha256-checked, headers checked against the index, files fsynced, published),
#     each pull from empty page caches on this side and a registry serving its blobs from memory,
#     vs oras pull + sync and oras pull alone
#   weightsnap push vs oras push (each to a fresh repository, so every blob is uploaded)
#   peak RSS of weightsnap pull and push
#   the CPU seconds of each client and of the registry beside it: the registry runs on the same
#     cores, so where a transfer keeps them busy, client + registry CPU-s is about seconds x cores
# The registry (distribution) and oras come from the harness's install (test/e2e/deps).
#
# Every row is the median of REPS runs with its min and max (scripts/bench-lib.sh: mmm, ratio).
# Usage: scripts/bench-oci.sh [SIZE] [SHARDS] [REPS]   (default 2GiB, 8, BENCH_REPS or 5)
# Env:   WEIGHTSNAP_PEERS_BIN  the peers' bin directory (default: test/e2e/deps -q)
#        WEIGHTSNAP            a weightsnap binary to use (default: built from this tree)
#        BENCH_DIR             where the registry, stores and pulled files live (default /var/tmp)
#        DROP_CACHES=1         drop the page cache before every transfer (root only)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
size=${1:-2GiB}
shards=${2:-8}
reps=${3:-$BENCH_REPS}
rev=0123456789abcdef0123456789abcdef01234567

bin=${WEIGHTSNAP_PEERS_BIN:-}
if [ -z "$bin" ]; then
	bin=$(test/e2e/deps -q | tail -n 1)
fi
oras=$bin/oras
registry=$bin/registry
for t in "$oras" "$registry" /usr/bin/time; do
	[ -x "$t" ] || { echo "bench-oci: $t missing (run test/e2e/deps; apt-get install time)" >&2; exit 1; }
done

work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-bench-oci.XXXXXX")
regpid=
cleanup() {
	if [ -n "$regpid" ]; then
		kill "$regpid" 2>/dev/null || true
		wait "$regpid" 2>/dev/null || true
	fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

ws=${WEIGHTSNAP:-}
if [ -z "$ws" ]; then
	go build -o "$work/bin/" ./cmd/weightsnap
	ws=$work/bin/weightsnap
fi

# A registry on a free loopback port, storing on the bench disk.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 5077)
registry_config "$work/registry.yml" "$work/registry" "127.0.0.1:$port"
OTEL_TRACES_EXPORTER=none "$registry" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
regpid=$!
host=127.0.0.1:$port
for _ in $(seq 100); do
	curl -fsS -o /dev/null "http://$host/v2/" 2>/dev/null && break
	sleep 0.1
done
curl -fsS -o /dev/null "http://$host/v2/" || { echo "bench-oci: registry did not start" >&2; cat "$work/registry.log" >&2; exit 1; }

hash_floor
echo "bench-oci: synthesising $size in $shards shards under $work" >&2
"$ws" dev synth --out "$work/src" --size "$size" --shards "$shards" --dtype BF16 --seed 5 >/dev/null 2>&1
export WEIGHTSNAP_ROOT=$work/store
id=$("$ws" import "$work/src" --revision "$rev" --repository bench/model 2>/dev/null)
bytes=$(du -sb "$work/src" | cut -f1)
files=$(cd "$work/src" && ls)
"$ws" push --plain-http "$id" "$host/bench/model:v1" >/dev/null 2>&1
ref=$host/bench/model:v1

# warm_registry: reads the registry's blobs into the page cache, so every pull meets a registry
# serving from memory, as a busy remote one does: with DROP_CACHES=1 the registry would otherwise
# read each blob from this machine's disk, on the two cores the pulls run on, and that read, the
# same for both clients, would dominate what is measured.
warm_registry() { find "$work/registry" -type f -name data -exec cat {} + >/dev/null; }
# registry_cpu: the CPU seconds the registry has used so far
tck=$(getconf CLK_TCK)
registry_cpu() { awk -v t="$tck" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$regpid/stat"; }
# measured CMD...: runs CMD, leaving its peak RSS in KiB in $work/rss, its CPU seconds in $work/cpu and
# the registry's CPU seconds meanwhile in $work/regcpu
measured() {
	local r0 rc=0
	r0=$(registry_cpu)
	/usr/bin/time -f "%M %U %S" -o "$work/time" "$@" >/dev/null 2>&1 || rc=$?
	awk -v r="$(registry_cpu)" -v r0="$r0" -v w="$work" \
		'{ print $1 >(w "/rss"); printf "%.2f\n", $2 + $3 >(w "/cpu"); printf "%.2f\n", r - r0 >(w "/regcpu") }' "$work/time"
	return "$rc"
}
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
rss_pull=0
rss_push=0
declare -a ws_pull oras_pull oras_pull_sync ws_push oras_push disk
# the CPU seconds of each run: the client's (cpu_*) and the registry's (reg_*)
declare -a cpu_ws_pull reg_ws_pull cpu_oras_pull reg_oras_pull cpu_ws_push reg_ws_push cpu_oras_push reg_oras_push
cpu_of() { # cpu_of NAME: appends this run's client and registry CPU seconds to cpu_NAME and reg_NAME
	local -n c=cpu_$1 r=reg_$1
	c+=("$(cat "$work/cpu")")
	r+=("$(cat "$work/regcpu")")
}
for i in $(seq "$reps"); do
	echo "bench-oci: round $i of $reps" >&2
	disk+=("$(disk_floor "$work" "$work/src"/*)")
	# Alternate who goes first, so neither always meets a warmer cache.
	for who in $([ $((i % 2)) = 1 ] && echo "ws oras" || echo "oras ws"); do
		if [ "$who" = ws ]; then
			rm -rf "$work/pull-store"; settle; warm_registry
			t=$(now); WEIGHTSNAP_ROOT=$work/pull-store measured "$ws" pull --plain-http "$ref"; ws_pull+=("$(since "$t")")
			rss_pull=$(max "$rss_pull" "$(cat "$work/rss")"); cpu_of ws_pull
			WEIGHTSNAP_ROOT=$work/pull-store "$ws" verify "$id" >/dev/null
			chmod -R u+w "$work/pull-store"; rm -rf "$work/pull-store"; settle
			t=$(now); measured "$ws" push --plain-http "$id" "$host/ws/push$i:v1"; ws_push+=("$(since "$t")")
			rss_push=$(max "$rss_push" "$(cat "$work/rss")"); cpu_of ws_push
		else
			rm -rf "$work/oras-out"; settle; warm_registry
			t=$(now); measured "$oras" pull --plain-http -o "$work/oras-out" "$ref"; oras_pull+=("$(since "$t")")
			sync; oras_pull_sync+=("$(since "$t")"); cpu_of oras_pull
			rm -rf "$work/oras-out"; settle
			# shellcheck disable=SC2086 # one argument per file
			t=$(now); (cd "$work/src" && measured "$oras" push --plain-http "$host/oras/push$i:v1" $files); oras_push+=("$(since "$t")")
			cpu_of oras_push
		fi
	done
done

met() { awk -v a="$1" -v b="$2" -v g="$3" 'BEGIN { print (a / b >= g) ? "yes" : "NO" }'; }
m() { printf '%s\n' "$@" | median; } # m VALUES...: their median
f_pull=$(awk -v b="$bytes" -v c="$floor_sha" -v n="$cores" 'BEGIN { printf "%.2f", b / 2^30 * c / n }')
gib=$(awk -v b="$bytes" 'BEGIN { print b / 2^30 }')
# perGiB VALUES...: CPU-s per GiB of each of VALUES (CPU seconds)
perGiB() { for v in "$@"; do awk -v v="$v" -v g="$gib" 'BEGIN { printf "%.3f\n", v / g }'; done; }
# overFloor VALUES...: each of VALUES (CPU-s per GiB) over the BLAKE3 floor
overFloor() { for v in "$@"; do awk -v v="$v" -v f="$floor_b3" 'BEGIN { printf "%.3f\n", v / f }'; done; }
printf '\nweightsnap OCI benchmark: %s (%d bytes) in %s shards, %s cores, registry %s on %s\n' \
	"$size" "$bytes" "$shards" "$cores" "$host" "$(stat -f -c %T "$work")"
printf 'every figure: median [min-max] of %s runs; ratio: the contender'"'"'s seconds over weightsnap'"'"'s, median [worst-best the runs allow]\n' "$reps"
printf '%s; pull floor (sha256 of every byte over all cores) %.2f s\n' "$floor_line" "$f_pull"
printf 'disk floor (the same bytes written to one file and synced): %s s\n' "$(mmm "${disk[@]}")"
row() { printf '%-40s %20s %6s %26s %-8s %4s %20s %20s\n' "$@"; }
row "measure" "seconds" "GB/s" "ratio" "goal" "met" "CPU-s" "registry CPU-s"
row "weightsnap pull (verify+fsync+publish)" "$(mmm "${ws_pull[@]}")" "$(gbs "$(m "${ws_pull[@]}")")" "" "" "" "$(mmm "${cpu_ws_pull[@]}")" "$(mmm "${reg_ws_pull[@]}")"
row "oras pull + sync" "$(mmm "${oras_pull_sync[@]}")" "$(gbs "$(m "${oras_pull_sync[@]}")")" "$(ratio "${oras_pull_sync[*]}" "${ws_pull[*]}")" ">= 2x" "$(met "$(m "${oras_pull_sync[@]}")" "$(m "${ws_pull[@]}")" 2)" "" ""
row "oras pull (no sync)" "$(mmm "${oras_pull[@]}")" "$(gbs "$(m "${oras_pull[@]}")")" "$(ratio "${oras_pull[*]}" "${ws_pull[*]}")" ">= 1.3x" "$(met "$(m "${oras_pull[@]}")" "$(m "${ws_pull[@]}")" 1.3)" "$(mmm "${cpu_oras_pull[@]}")" "$(mmm "${reg_oras_pull[@]}")"
row "weightsnap push" "$(mmm "${ws_push[@]}")" "$(gbs "$(m "${ws_push[@]}")")" "" "" "" "$(mmm "${cpu_ws_push[@]}")" "$(mmm "${reg_ws_push[@]}")"
row "oras push" "$(mmm "${oras_push[@]}")" "$(gbs "$(m "${oras_push[@]}")")" "$(ratio "${oras_push[*]}" "${ws_push[*]}")" ">= 1.5x" "$(met "$(m "${oras_push[@]}")" "$(m "${ws_push[@]}")" 1.5)" "$(mmm "${cpu_oras_push[@]}")" "$(mmm "${reg_oras_push[@]}")"
row "weightsnap pull over the disk floor" "" "" "$(ratio "${ws_pull[*]}" "${disk[*]}")" "" "" "" ""
mapfile -t pull_gib < <(perGiB "${cpu_ws_pull[@]}")
mapfile -t pull_floor < <(overFloor "${pull_gib[@]}")
printf 'weightsnap pull CPU-s/GiB: %s, %s x the BLAKE3 floor (goal <= 1.5x: %s)\n' "$(PREC=3 mmm "${pull_gib[@]}")" "$(mmm "${pull_floor[@]}")" \
	"$(awk -v r="$(m "${pull_floor[@]}")" 'BEGIN { print (r <= 1.5) ? "yes" : "NO" }')"
printf 'CPU-s: the client'"'"'s CPU seconds and the registry'"'"'s meanwhile, on the same %s cores (%s CPU-s per second)\n' "$cores" "$cores"
printf 'peak RSS goal: each < 128 MiB: pull %s MiB %s, push %s MiB %s\n' \
	"$((rss_pull / 1024))" "$(awk -v k="$rss_pull" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')" "$((rss_push / 1024))" "$(awk -v k="$rss_push" 'BEGIN { print (k < 131072) ? "yes" : "NO" }')"
printf 'runs (s): ws pull %s | oras pull %s | ws push %s | oras push %s | disk %s\n' \
	"${ws_pull[*]}" "${oras_pull[*]}" "${ws_push[*]}" "${oras_push[*]}" "${disk[*]}"
