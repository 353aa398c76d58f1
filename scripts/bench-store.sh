#!/usr/bin/env bash
# Store benchmark, side by side in one run on the same files and disk:
# import vs cp+sync, verify --full vs b3sum and sha256sum, peak RSS of import.
# Usage: scripts/bench-store.sh [SIZE] [SHARDS]   (default 2GiB, 4)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-2GiB}
shards=${2:-4}
ws=$PWD/bin/weightsnap
for tool in b3sum /usr/bin/time; do
	if ! command -v "$tool" >/dev/null; then
		if [ "$(id -u)" = 0 ]; then
			apt-get install -y -qq b3sum time >/dev/null
		else
			echo "bench-store: $tool missing (apt-get install b3sum time)" >&2
			exit 1
		fi
	fi
done
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/weightsnap-bench.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
rev=0123456789abcdef0123456789abcdef01234567

$ws dev synth --out "$work/src" --size "$size" --shards "$shards" --dtype BF16 --seed 3 >/dev/null 2>&1
cat "$work/src"/* >/dev/null # source warm in the page cache for every contender
sync

secs() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc -l; }

t_cp=$(secs bash -c "cp -r '$work/src' '$work/cp' && sync")
rm -rf "$work/cp"; sync
export WEIGHTSNAP_ROOT="$work/store"
/usr/bin/time -f "%e %M" -o "$work/import.time" "$ws" import "$work/src" --revision "$rev" >"$work/id" 2>/dev/null
read -r t_import rss_kb <"$work/import.time"
sync
id=$(cat "$work/id")
t_warm=$(secs "$ws" import "$work/src" --revision "$rev")
files=("$work/store/artifacts/${id#sha256:}"/*.safetensors)
cat "${files[@]}" >/dev/null # warm
t_verify=$(secs "$ws" verify --full "$id")
t_b3=$(secs b3sum "${files[@]}")
t_sha=$(secs sha256sum "${files[@]}")

ratio() { echo "scale=2; $1 / $2" | bc -l; }
printf '\nweightsnap store benchmark: %s in %s shards, %s cores, %s\n' "$size" "$shards" "$(nproc)" "$(stat -f -c %T "$work")"
printf '%-34s %9s %9s  %s\n' "measure" "seconds" "ratio" "goal"
printf '%-34s %9.2f %9s  %s\n' "cp -r + sync" "$t_cp" "1.00" ""
printf '%-34s %9.2f %9s  %s\n' "weightsnap import (cold fingerprint)" "$t_import" "$(ratio "$t_import" "$t_cp")" "<= 1.3 x cp+sync"
printf '%-34s %9.3f %9s  %s\n' "weightsnap import again (warm hit)" "$t_warm" "$(ratio "$t_warm" "$t_cp")" "no source byte read"
printf '%-34s %9.2f %9s  %s\n' "b3sum (warm)" "$t_b3" "1.00" ""
printf '%-34s %9.2f %9s  %s\n' "weightsnap verify --full (warm)" "$t_verify" "$(ratio "$t_verify" "$t_b3")" "<= 1.5 x b3sum"
printf '%-34s %9.2f %9s  %s\n' "sha256sum (warm)" "$t_sha" "$(ratio "$t_verify" "$t_sha")" "verify / sha256sum"
printf '%-34s %9d %9s  %s\n' "import peak RSS (MiB)" "$((rss_kb / 1024))" "" "< 128 MiB"
