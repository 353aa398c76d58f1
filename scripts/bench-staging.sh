#!/usr/bin/env bash
# Staging benchmark, side by side in one run on the same trees and the same destination filesystem:
#   hub-mirror first copy (verify full, and sample-hash) vs cp -a and rsync -a (each + sync),
#   the no-op re-run vs rsync -a's no-op,
#   a 1,000-file repository: first run vs re-run (time and syscalls, strace -c), and rsync's no-op.
# Every row is the median over runs that alternate the contenders, so a burst of other work on the
# machine lands on all of them, with its min and max and its ratio to the row's reference with the
# range the runs allow (scripts/bench-lib.sh: mmm, ratio): a copy row of COPY_RUNS rounds (the
# copies' seconds of each round are printed too), a no-op row of NOOP_RUNS runs. The disk's floor
# (the same bytes written into one file on the destination and synced) is measured every round.
# The destination is an ext4 filesystem on a loop-mounted image, which the loop device writes with
# direct I/O (as root; else a folder beside the source, noted in the title). The source is warmed into
# the page cache before every contender (weightsnap drops the source's pages after copying, as it
# would for a network filesystem).
# Env:   DROP_CACHES=1  empty the page cache before warming the source for each contender (root only):
#                       on a virtual machine the pages an earlier contender freed cost the next one a
#                       fault to the host each
#        COPY_RUNS=N    rounds of copies (default BENCH_REPS or 5)
#        NOOP_RUNS=N    runs per no-op row (default BENCH_REPS or 5)
# Usage: scripts/bench-staging.sh [SIZE] [FILES]   (default 2GiB, 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
size=${1:-2GiB}
files=${2:-1000}
noop_runs=${NOOP_RUNS:-$BENCH_REPS}
copy_runs=${COPY_RUNS:-$BENCH_REPS}
ws=$PWD/bin/weightsnap
for tool in rsync strace bc; do
	if ! command -v "$tool" >/dev/null; then
		if [ "$(id -u)" = 0 ]; then
			apt-get install -y -qq "$tool" >/dev/null
		else
			echo "bench-staging: $tool missing (apt-get install $tool)" >&2
			exit 1
		fi
	fi
done
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-bench-staging.XXXXXX")
dst=$work/dst
mkdir -p "$dst"
cleanup() {
	mountpoint -q "$dst" && umount "$dst"
	rm -rf "$work"
}
trap cleanup EXIT
commit=0123456789abcdef0123456789abcdef01234567

# Sources: one big repository (a synthetic checkpoint) and one of many small files.
$ws dev synth --out "$work/model" --size "$size" --shards 4 --dtype BF16 --seed 7 >/dev/null 2>&1
$ws dev hub "$work/model" --out "$work/big/hub" --repo org/big --commit "$commit" >/dev/null
mkdir -p "$work/small"
for i in $(seq 1 "$files"); do
	head -c $((4096 + (i * 37) % 61440)) /dev/urandom >"$work/small/f$((i % 20))-$i.json" 2>/dev/null
done
mkdir -p "$work/many/hub"
$ws dev hub "$work/small" --out "$work/many/hub" --repo org/many --commit "$commit" >/dev/null
src_bytes=$(du -sbL "$work/big/hub/models--org--big/snapshots/$commit" | cut -f1)

# The destination: its own ext4 filesystem, big enough for two copies of everything.
fstype="the source's filesystem (not root: no loop mount)"
if [ "$(id -u)" = 0 ]; then
	img_bytes=$((src_bytes * 5 / 2 + (1 << 30)))
	truncate -s "$img_bytes" "$work/dst.img"
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$work/dst.img"
	mount -o loop "$work/dst.img" "$dst"
	fstype="ext4 on a loop image"
	# The loop device writes to its image with direct I/O where the image's filesystem allows, so it
	# behaves as a disk does: a buffered loop device holds every write a second time in the page
	# cache, as dirty pages of the image, and writes them to the disk only when sync flushes it, so
	# writeback started during a copy does not reach the disk, and the whole flush comes at the end.
	if losetup --direct-io=on "$(findmnt -n -o SOURCE "$dst")" 2>/dev/null; then
		fstype="$fstype (direct I/O)"
	else
		fstype="$fstype (buffered: the image's filesystem refuses direct I/O)"
	fi
fi

# warm DIR: settle, then read every file below DIR into the page cache.
warm() {
	settle
	find "$1" -type f -exec cat {} + >/dev/null
}
# syscalls CMD...: the total number of system calls CMD makes (strace -f -c).
syscalls() { strace -f -c -o "$work/strace.out" "$@" >/dev/null 2>&1; awk '$NF == "total" { print $(NF-2) }' "$work/strace.out"; }
recipe() { # recipe ID SRC DST VERIFY
	printf '[[staging]]\nid = "%s"\nkind = "hub-mirror"\nsrc = "%s"\ndst = "%s"\nverify = "%s"\nmax_used = "100%%"\n' "$1" "$2" "$3" "$4" >"$work/$1.toml"
	echo "$work/$1.toml"
}
stage() { "$ws" --root "$work/store" --config /dev/null stage "$@"; }
# noops A B: runs commands A and B (strings for eval) noop_runs times each, alternating, and
# prints the seconds of A's runs on one line and of B's on the next
noops() {
	local i a=() b=()
	for ((i = 0; i < noop_runs; i++)); do
		a+=("$(secs eval "$1")")
		b+=("$(secs eval "$2")")
	done
	echo "${a[*]}"
	echo "${b[*]}"
}

big=$work/big/hub
# The copies, in copy_runs rounds of cp, rsync, weightsnap full, weightsnap sample-hash; each row is
# the median of its rounds. Every weightsnap round but the last stages with a state directory of its
# own, removed with its copy (no ledger of an earlier round, no blob to hardlink); the last one's
# sample-hash lane and rsync copy stay for the no-op rows.
c_cp=() c_rsync=() c_full=() c_sample=() c_disk=()
for ((r = 1; r <= copy_runs; r++)); do
	root=$work/store-$r
	[ "$r" = "$copy_runs" ] && root=$work/store
	c_disk+=("$(disk_floor "$dst" "$big"/models--org--big/blobs/*)")
	warm "$big"
	c_cp+=("$(secs bash -c "cp -a '$big' '$dst/cp' && sync")")
	rm -rf "$dst/cp"
	rm -rf "$dst/rsync"
	warm "$big"
	c_rsync+=("$(secs bash -c "rsync -a '$big/' '$dst/rsync/' && sync")")
	warm "$big"
	c_full+=("$(secs "$ws" --root "$root" --config /dev/null stage "$(recipe full "$big" "$dst/full" full)")")
	rm -rf "$dst/full"
	[ "$r" != "$copy_runs" ] && rm -rf "$dst/sample"
	warm "$big"
	c_sample+=("$(secs "$ws" --root "$root" --config /dev/null stage "$(recipe sample "$big" "$dst/sample" sample-hash)")")
	[ "$r" != "$copy_runs" ] && rm -rf "$dst/sample" "$root"
done
warm "$big"
{
	read -r t_rsync_noop
	read -r t_noop
} < <(noops "rsync -a '$big/' '$dst/rsync/'" "'$ws' --root '$work/store' --config /dev/null stage '$work/sample.toml'")
rm -rf "$dst/rsync" "$dst/sample"; sync

many=$work/many/hub
t_many_first=()
for ((r = 1; r <= copy_runs; r++)); do
	warm "$many"
	t_many_first+=("$(secs stage "$(recipe "many$r" "$many" "$dst/many$r" full)")")
	[ "$r" = 1 ] || rm -rf "$dst/many$r"
done
n_many_first=$(syscalls "$ws" --root "$work/store" --config /dev/null stage "$(recipe many0 "$many" "$dst/many0" full)")
n_many_again=$(syscalls "$ws" --root "$work/store" --config /dev/null stage "$work/many0.toml")
rsync -a "$many/" "$dst/many-rsync/"
sync
{
	read -r t_many_rsync
	read -r t_many_again
} < <(noops "rsync -a '$many/' '$dst/many-rsync/'" "'$ws' --root '$work/store' --config /dev/null stage '$work/many1.toml'")
n_many_rsync=$(syscalls rsync -a "$many/" "$dst/many-rsync/")

printf '\nweightsnap staging benchmark: %s repository (4 shards) and a %d-file repository, %s cores\n' "$size" "$files" "$(nproc)"
printf 'source: %s (page cache warm); destination: %s\n' "$(stat -f -c %T "$work")" "$fstype"
printf 'every figure: median [min-max] of %s copy rounds or %s no-op runs; ratio: the row'"'"'s seconds over its reference'"'"'s, median [worst-best the runs allow]\n' "$copy_runs" "$noop_runs"
printf 'disk floor (the big repository'"'"'s bytes written to one file on the destination and synced): %s s\n' "$(mmm "${c_disk[@]}")"
printf 'copies, seconds per round: cp %s; rsync %s; full %s; sample-hash %s; disk %s\n' "${c_cp[*]}" "${c_rsync[*]}" "${c_full[*]}" "${c_sample[*]}" "${c_disk[*]}"
row() { printf '%-44s %22s %26s %11s  %s\n' "$@"; }
row "measure" "seconds" "ratio" "syscalls" "goal"
row "cp -a + sync" "$(mmm "${c_cp[@]}")" "$(ratio "${c_cp[*]}" "${c_disk[*]}")" "" "(over the disk floor)"
row "rsync -a + sync" "$(mmm "${c_rsync[@]}")" "$(ratio "${c_rsync[*]}" "${c_cp[*]}")" "" "(over cp -a)"
row "weightsnap stage, verify full (hashes all)" "$(mmm "${c_full[@]}")" "$(ratio "${c_full[*]}" "${c_cp[*]}")" "" "<= 1.1 x cp -a"
row "weightsnap stage, verify sample-hash" "$(mmm "${c_sample[@]}")" "$(ratio "${c_sample[*]}" "${c_cp[*]}")" "" "<= 1.0 x cp -a"
row "weightsnap stage, sample-hash, over disk floor" "" "$(ratio "${c_sample[*]}" "${c_disk[*]}")" "" ""
PREC=3
# shellcheck disable=SC2086 # one argument per run
row "rsync -a again (no-op)" "$(mmm $t_rsync_noop)" "" "" ""
# shellcheck disable=SC2086
row "weightsnap stage again (auto, no-op)" "$(mmm $t_noop)" "$(ratio "$t_noop" "$t_rsync_noop")" "" "<= 1.0 x rsync no-op"
row "$files files: weightsnap first run (full)" "$(mmm "${t_many_first[@]}")" "" "$n_many_first" ""
# shellcheck disable=SC2086
row "$files files: rsync -a no-op" "$(mmm $t_many_rsync)" "" "$n_many_rsync" ""
# shellcheck disable=SC2086
row "$files files: weightsnap re-run (auto, no-op)" "$(mmm $t_many_again)" "$(ratio "$t_many_again" "$t_many_rsync")" "$n_many_again" "<= 1.0 x rsync no-op"
