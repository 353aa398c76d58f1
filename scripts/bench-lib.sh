# Shared by the bench scripts, which source it: timing, the page cache between contenders, medians.

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
# median: the median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# gbs SECONDS: the GB/s of moving $bytes in SECONDS
gbs() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
# speedup A B: A / B as "1.23x"
speedup() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
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
