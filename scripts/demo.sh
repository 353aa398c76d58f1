#!/usr/bin/env bash
# make demo: synthesise a 1 GiB model, import it into a temporary store,
# verify it fully, resolve a TP rank, stage it as a hub mirror, and print
# the inspect report.
set -euo pipefail
cd "$(dirname "$0")/.."
ws=./bin/weightsnap
work=$(mktemp -d "${TMPDIR:-/tmp}/weightsnap-demo.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export WEIGHTSNAP_ROOT="$work/store"
rev=0123456789abcdef0123456789abcdef01234567

echo "== synthesise a 1 GiB checkpoint (4 shards, BF16)"
$ws dev synth --out "$work/model" --size 1GiB --shards 4 --dtype BF16 --seed 1
ls -l "$work/model"

echo "== import it into a temporary store at $WEIGHTSNAP_ROOT"
start=$(date +%s.%N)
id=$($ws import "$work/model" --revision "$rev" --repository demo/synthetic-1g)
echo "identity: $id  ($(echo "$(date +%s.%N) - $start" | bc) s)"

echo "== import again: a warm hit, nothing copied"
$ws import "$work/model" --revision "$rev" --repository demo/synthetic-1g --json

echo "== verify every byte"
$ws verify --full "$id"

echo "== resolve tensor-parallel rank 0 of 2 (tp-split by contrib/layouts/llama-tp.toml), then again: a warm hit"
for run in cold warm; do
	$ws resolve --from "$work/model" --revision "$rev" --repository demo/synthetic-1g --tp-size 2 --tp-rank 0 \
		--layout-spec contrib/layouts/llama-tp.toml --report "$work/report-$run.json" >/dev/null
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2]+":", r["outcome"], "from", r["source"], r.get("counters"))' "$work/report-$run.json" "$run"
done

echo "== stage: the model as a hub cache snapshot on a 'shared store', mirrored to a node's hub cache"
echo "   (every blob verified against its name), then again: nothing copied; then where it resolves"
$ws dev hub "$work/model" --out "$work/nas/hub" --repo demo/synthetic-1g --commit "$rev" >/dev/null
cat >"$work/recipe.toml" <<EOF
[[staging]]
id = "demo"
kind = "hub-mirror"
src = "$work/nas/hub"
dst = "$work/node/hub"
max_used = "100%"
emit_env = "HF_HUB_CACHE"
EOF
$ws stage "$work/recipe.toml" --dry-run | sed -n 3,4p
$ws stage "$work/recipe.toml" 2>/dev/null
$ws stage "$work/recipe.toml"
$ws staging ls
$ws stage locate demo/synthetic-1g

echo "== inspect"
$ws inspect "${id#sha256:}"
$ws ls
$ws inspect --domain
