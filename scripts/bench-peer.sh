#!/usr/bin/env bash
# Weight peer benchmark, side by side in one run, node B fetching the same artifact from node A over
# the same veth pair (two network namespaces, root needed), node A serving from memory (see fresh),
# and again with node A's reads on the disk for the peer and oras:
#   weightsnap peer fetch, tcp, with its default rails (one per core, at most 4): every byte
#     BLAKE3-checked on arrival, files hashed, fsynced, published; and the same over rma, through
#     libfabric's sockets provider (one-sided reads; a software fabric here)
#   weightsnap pull and oras pull (+ sync) from a registry running on node A
#   a raw copy of the same bytes: socat from A into one file on B, then sync
# The registry and oras come from the harness's install (test/e2e/deps); socat from Debian.
#
# Every row is the median of REPS runs with its min and max, and its ratio to the peer's tcp fetch
# with the range the runs allow (scripts/bench-lib.sh: mmm, ratio); the raw copy is the floor of the
# link and the disk together, measured in every round.
# Usage: scripts/bench-peer.sh [SIZE] [SHARDS] [REPS]   (default 2GiB, 8, BENCH_REPS or 5)
# Env:   WEIGHTSNAP_PEERS_BIN  the peers' bin directory (default: test/e2e/deps -q)
#        BENCH_DIR             where the stores and pulled files live (default /var/tmp)
#        DROP_CACHES=1         drop the page cache before every transfer (node A then reads back what it serves, but for the cold rows)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
size=${1:-2GiB}
shards=${2:-8}
reps=${3:-$BENCH_REPS}
rev=0123456789abcdef0123456789abcdef01234567
[ "$(id -u)" = 0 ] || { echo "bench-peer: needs root (network namespaces)" >&2; exit 1; }

bin=${WEIGHTSNAP_PEERS_BIN:-}
if [ -z "$bin" ]; then
	bin=$(test/e2e/deps -q | tail -n 1)
fi
oras=$bin/oras
registry=$bin/registry
for t in "$oras" "$registry" "$(command -v socat)"; do
	[ -x "$t" ] || { echo "bench-peer: $t missing (run test/e2e/deps)" >&2; exit 1; }
done

work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-bench-peer.XXXXXX")
tag=$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')
nsa=ws-bencha-$tag nsb=ws-benchb-$tag
pids=()
# cleanup stops every process left in either namespace: $! of "ina cmd &" is the subshell that runs the
# function, and killing it alone left node A's peer and registry running after the bench.
cleanup() {
	for ns in "$nsa" "$nsb"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns delete "$nsa" 2>/dev/null || true
	ip netns delete "$nsb" 2>/dev/null || true
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "bench-peer: building weightsnap (and with -tags libfabric for rma)" >&2
go build -o "$work/bin/" ./cmd/weightsnap
go build -tags libfabric -o "$work/rma/" ./cmd/weightsnap
ws=$work/bin/weightsnap
wsrma=$work/rma/weightsnap

ip netns add "$nsa"
ip netns add "$nsb"
ip link add "wsa$tag" netns "$nsa" type veth peer name "wsb$tag" netns "$nsb"
ip -n "$nsa" addr add 10.233.91.1/24 dev "wsa$tag"
ip -n "$nsb" addr add 10.233.91.2/24 dev "wsb$tag"
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "wsa$tag" up
ip -n "$nsb" link set "wsb$tag" up
ina() { ip netns exec "$nsa" "$@"; }
inb() { ip netns exec "$nsb" "$@"; }

echo "bench-peer: synthesising $size in $shards shards under $work" >&2
"$ws" dev synth --out "$work/src" --size "$size" --shards "$shards" --dtype BF16 --seed 5 >/dev/null 2>&1
id=$("$ws" --root "$work/a" --config "" import "$work/src" --revision "$rev" --repository bench/model 2>/dev/null)
files=$(cd "$work/src" && ls)
# shellcheck disable=SC2086 # one argument per file
bytes=$(cd "$work/src" && stat -c %s $files | awk '{ s += $1 } END { printf "%.0f\n", s }')

# Node A: the peer (rma-capable binary, sockets provider) and a registry holding the same artifact.
ina "$wsrma" --root "$work/a" --config "" peer serve --listen 10.233.91.1:7420 --allow-unauthenticated --fabric-provider sockets >"$work/serve.log" 2>&1 &
pids+=($!)
registry_config "$work/registry.yml" "$work/registry" 10.233.91.1:5000
OTEL_TRACES_EXPORTER=none ina "$registry" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	inb "$ws" --config "" peer ls 10.233.91.1:7420 >/dev/null 2>&1 && inb curl -fsS -o /dev/null http://10.233.91.1:5000/v2/ 2>/dev/null && break
	sleep 0.1
done
ina "$ws" --root "$work/a" --config "" push --plain-http "$id" 10.233.91.1:5000/bench/model:v1 >/dev/null 2>&1
ref=10.233.91.1:5000/bench/model:v1

# fresh [DIR...]: empties node B, settles, then reads DIR... (what node A is about to serve) into the page
# cache. Both "nodes" here write and read one virtual disk: a sender reading cold competes for it with
# the receiver's writes, as no two nodes do (and, with DROP_CACHES=1, as a seed that holds or just
# fetched the weights does not). So every sender serves from memory, the registry as in bench-oci; the
# cold rows show the same transfers with node A's reads on the shared disk.
fresh() {
	chmod -R u+w "$work/b" 2>/dev/null || true
	rm -rf "$work/b"
	settle
	[ $# = 0 ] || find "$@" -type f -exec cat {} + >/dev/null
}
store_a=$work/a/artifacts/${id#sha256:}

declare -a r_tcp r_rma r_pull r_oras r_raw r_tcp_cold r_oras_cold
for i in $(seq "$reps"); do
	echo "bench-peer: round $i of $reps" >&2
	fresh "$store_a"; t=$(now); inb "$ws" --root "$work/b" --config "" peer fetch 10.233.91.1:7420 "$id" --json >"$work/tcp.json" 2>/dev/null; r_tcp+=("$(since "$t")")
	inb "$ws" --root "$work/b" --config "" verify "$id" >/dev/null
	fresh "$store_a"; t=$(now); inb "$wsrma" --root "$work/b" --config "" peer fetch 10.233.91.1:7420 "$id" --mode rma --json >"$work/rma.json" 2>/dev/null; r_rma+=("$(since "$t")")
	inb "$ws" --root "$work/b" --config "" verify "$id" >/dev/null
	fresh "$work/registry"; t=$(now); inb "$ws" --root "$work/b" --config "" pull --plain-http "$ref" >/dev/null 2>&1; r_pull+=("$(since "$t")")
	fresh "$work/registry"; t=$(now); inb "$oras" pull --plain-http -o "$work/b" "$ref" >/dev/null; sync; r_oras+=("$(since "$t")")
	fresh "$work/src"; mkdir -p "$work/b"
	(cd "$work/src" && ina sh -c "cat $(echo $files) | socat -u -b 1048576 STDIN TCP-LISTEN:9000,reuseaddr") &
	sp=$!
	for _ in $(seq 100); do ina ss -Hltn 'sport = :9000' | grep -q . && break; sleep 0.05; done
	t=$(now); inb socat -u -b 1048576 TCP:10.233.91.1:9000 CREATE:"$work/b/raw"; sync; r_raw+=("$(since "$t")")
	wait "$sp" || true
	[ "$(stat -c %s "$work/b/raw")" = "$bytes" ] || echo "bench-peer: raw copy moved $(stat -c %s "$work/b/raw") of $bytes bytes" >&2
	fresh; t=$(now); inb "$ws" --root "$work/b" --config "" peer fetch 10.233.91.1:7420 "$id" >/dev/null 2>&1; r_tcp_cold+=("$(since "$t")")
	inb "$ws" --root "$work/b" --config "" verify "$id" >/dev/null
	fresh; t=$(now); inb "$oras" pull --plain-http -o "$work/b" "$ref" >/dev/null; sync; r_oras_cold+=("$(since "$t")")
	echo "bench-peer: round $i (s): tcp ${r_tcp[-1]} rma ${r_rma[-1]} ws pull ${r_pull[-1]} oras+sync ${r_oras[-1]} raw ${r_raw[-1]}" \
		"| cold sender: tcp ${r_tcp_cold[-1]} oras+sync ${r_oras_cold[-1]}" >&2
done

# rails FILE: the rail count a fetch's JSON report names (the default asked for, or fewer if the peer granted fewer)
rails() { grep -o '"rails": *[0-9]*' "$1" | grep -o '[0-9]*$'; }
tcp_rails=$(rails "$work/tcp.json")
rma_rails=$(rails "$work/rma.json")
m() { printf '%s\n' "$@" | median; } # m VALUES...: their median
printf '\nweightsnap peer benchmark: %s (%d bytes) in %s shards, %s cores, node B fetching from node A over one veth, node A serving from memory\n' \
	"$size" "$bytes" "$shards" "$(nproc)"
printf 'every figure: median [min-max] of %s runs; ratio: the row'"'"'s seconds over the peer'"'"'s tcp fetch, median [worst-best the runs allow]\n' "$reps"
printf 'floor: the raw copy (the link'"'"'s rate and the disk'"'"'s synced write of the same bytes together), %s GB/s\n' "$(gbs "$(m "${r_raw[@]}")")"
row() { printf '%-52s %20s %7s %26s  %s\n' "$@"; }
row "measure" "seconds" "GB/s" "ratio" "goal"
row "peer fetch tcp, $tcp_rails rails (verify + fsync + publish)" "$(mmm "${r_tcp[@]}")" "$(gbs "$(m "${r_tcp[@]}")")" "" ""
row "peer fetch rma/sockets, $rma_rails rails (same)" "$(mmm "${r_rma[@]}")" "$(gbs "$(m "${r_rma[@]}")")" "$(ratio "${r_rma[*]}" "${r_tcp[*]}")" "(software fabric)"
row "weightsnap pull from a registry on A" "$(mmm "${r_pull[@]}")" "$(gbs "$(m "${r_pull[@]}")")" "$(ratio "${r_pull[*]}" "${r_tcp[*]}")" ""
row "oras pull + sync from the same registry" "$(mmm "${r_oras[@]}")" "$(gbs "$(m "${r_oras[@]}")")" "$(ratio "${r_oras[*]}" "${r_tcp[*]}")" ">= 2x"
row "raw copy: socat into one file + sync (floor)" "$(mmm "${r_raw[@]}")" "$(gbs "$(m "${r_raw[@]}")")" "$(ratio "${r_raw[*]}" "${r_tcp[*]}")" ">= 0.8x"
row "cold sender: peer fetch tcp, $tcp_rails rails" "$(mmm "${r_tcp_cold[@]}")" "$(gbs "$(m "${r_tcp_cold[@]}")")" "" "(A reads the disk B writes)"
row "cold sender: oras pull + sync" "$(mmm "${r_oras_cold[@]}")" "$(gbs "$(m "${r_oras_cold[@]}")")" "$(ratio "${r_oras_cold[*]}" "${r_tcp_cold[*]}")" ""
printf 'runs (s): tcp %s | rma %s | ws pull %s | oras+sync %s | raw %s | cold: tcp %s, oras+sync %s\n' \
	"${r_tcp[*]}" "${r_rma[*]}" "${r_pull[*]}" "${r_oras[*]}" "${r_raw[*]}" "${r_tcp_cold[*]}" "${r_oras_cold[*]}"
