# Shared by the bench scripts, which source it: timing, the page cache between contenders, a row's
# figures (median [min-max] of its runs, ratios with their range), the floors.

now() { date +%s.%N; }
# since T: the seconds from T (a now) until now
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# secs CMD...: runs CMD quietly and prints its seconds
secs() { local t; t=$(now); "$@" >/dev/null 2>&1; since "$t"; }
# settle: writes back what came before and, with DROP_CACHES=1 (root; make bench sets it), empties
# the page cache, so every contender starts from the same memory: on a virtual machine the pages an
# earlier contender freed cost the next one a fault to the host each.
settle() {
	sync
	if [ "${DROP_CACHES:-}" = 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}
# BENCH_REPS: the runs every row is the median of, unless a script's argument says otherwise.
BENCH_REPS=${BENCH_REPS:-5}
# stats VALUES...: "median min max" of VALUES
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR] }'; }
# median: the median of the numbers on stdin
median() {
	local v
	mapfile -t v
	stats "${v[@]}" | cut -d' ' -f1
}
# mmm VALUES...: a row's figure, "median [min-max]" of VALUES, with $PREC decimals (default 2)
mmm() { stats "$@" | awk -v p="${PREC:-2}" '{ f = "%." p "f"; printf f " [" f "-" f "]", $1, $2, $3 }'; }
# ratio "NUMS" "DENS": NUMS over DENS (space-separated runs) as "median [low-high]x", the ratio of the
# medians and the range the runs allow, NUMS' min over DENS' max to NUMS' max over DENS' min; a
# contender's seconds over weightsnap's (NUMS the contender) read as weightsnap's speedup, worst to
# best. NUMS spread more than 1.3x (max over min) adds "; spread" and that.
ratio() {
	local nm nl nh dm dl dh
	# shellcheck disable=SC2086 # one argument per run
	read -r nm nl nh < <(stats $1)
	# shellcheck disable=SC2086
	read -r dm dl dh < <(stats $2)
	awk -v nm="$nm" -v nl="$nl" -v nh="$nh" -v dm="$dm" -v dl="$dl" -v dh="$dh" 'BEGIN {
		printf "%.2f [%.2f-%.2f]x", nm / dm, nl / dh, nh / dl
		if (nl > 0 && nh / nl > 1.3) printf "; spread %.2fx", nh / nl
	}'
}
# disk_floor DIR FILE...: the seconds of writing FILE...'s bytes (read from the page cache) into one
# new file in DIR and syncing it: the disk's floor for a command that must write those bytes durably
disk_floor() {
	local dir=$1 t
	shift
	cat "$@" >/dev/null
	settle
	cat "$@" >/dev/null
	t=$(now)
	cat "$@" | dd of="$dir/disk-floor" bs=1M conv=fsync status=none
	since "$t"
	rm -f "$dir/disk-floor"
}
# gbs SECONDS: the GB/s of moving $bytes in SECONDS
gbs() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
# registry_config FILE ROOT ADDR: writes the configuration of a registry (distribution) that stores
# under ROOT and listens on ADDR, quiet, deletes allowed
registry_config() {
	cat >"$1" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $2
  delete:
    enabled: true
http:
  addr: $3
EOF
}
# hash_floor: measures this machine's hashing floor (scripts/hash-floor.sh) into floor_sha and
# floor_b3 (CPU-s per GiB per core, medians) and cores, and the line that states it into floor_line
hash_floor() {
	local sl sh bl bh
	read -r floor_sha floor_b3 cores sl sh bl bh < <(scripts/hash-floor.sh)
	floor_line=$(printf 'hashing floor: sha256 %s [%s-%s], BLAKE3 %s [%s-%s] CPU-s/GiB per core (median [min-max] of %s), all %s cores hashing' \
		"$floor_sha" "$sl" "$sh" "$floor_b3" "$bl" "$bh" "$BENCH_REPS" "$cores")
}
# disk_floor_line SIZE: measures the disk's floor for SIZE of weights (bin/weightsnap dev synth, 4
# shards) in ${BENCH_DIR:-/var/tmp}, BENCH_REPS runs, into disk_line, the line that states it
disk_floor_line() {
	local work runs=() i bytes
	work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-floor.XXXXXX")
	bin/weightsnap dev synth --out "$work/src" --size "$1" --shards 4 >/dev/null 2>&1
	bytes=$(du -sb "$work/src" | cut -f1)
	for i in $(seq "$BENCH_REPS"); do
		runs+=("$(disk_floor "$work" "$work/src"/*)")
	done
	rm -rf "$work"
	disk_line=$(printf 'disk floor: %s s for %s (%s bytes) written to one new file and synced, %s GB/s (median [min-max] of %s), in %s' \
		"$(mmm "${runs[@]}")" "$1" "$bytes" "$(gbs "$(stats "${runs[@]}" | cut -d' ' -f1)")" "$BENCH_REPS" "${BENCH_DIR:-/var/tmp}")
}
