# Summarises `go test -bench -count N` output for scripts/bench-go.sh: for each benchmark, in the
# order they first ran, every figure it reports as "median [min-max] unit" over its N runs, and
# "spread" with max over min where its ns/op spread more than 1.3x. A package's "pkg:" line comes
# before its benchmarks. A failing or skipped benchmark's lines, panics, build errors and FAIL lines
# pass through, each once however many runs print it.

# once LINE: prints LINE unless it was printed already under the same "---" line
function once(line) { if (!((hdr, line) in printed)) { printed[hdr, line] = 1; print line } }
# fmtv V PREC: V with PREC decimals
function fmtv(v, prec) { return sprintf("%." prec "f", v) }
# prec V: the decimals that show V to about three significant figures
function prec(v) { v = v < 0 ? -v : v; return v >= 100 ? 0 : v >= 10 ? 1 : v >= 1 ? 2 : 3 }
# summary KEY: "median [min-max]" of the values vals[KEY] holds, separated by spaces
# (whole numbers stay whole)
function summary(key,    n, v, i, j, x, m, p, whole) {
	n = split(vals[key], v, " ")
	whole = 1
	for (i = 1; i <= n; i++) if (v[i] + 0 != int(v[i] + 0)) whole = 0
	for (i = 2; i <= n; i++) {
		x = v[i] + 0
		for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]
		v[j + 1] = x
	}
	m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	if (m != int(m)) whole = 0
	p = whole ? 0 : prec(m)
	lo[key] = v[1]; hi[key] = v[n]
	return fmtv(m, p) " [" fmtv(v[1], p) "-" fmtv(v[n], p) "]"
}

/^pkg: / { pkg = $2; next }
/^Benchmark/ && $2 ~ /^[0-9]+$/ {
	name = pkg " " $1
	if (!(name in seen)) { seen[name] = 1; order[++benches] = name; bpkg[name] = pkg; bname[name] = $1 }
	shown = 0; hdr = ""
	runs[name]++
	for (i = 3; i + 1 <= NF; i += 2) {
		key = name SUBSEP $(i + 1)
		if (!(key in vals)) units[name] = units[name] " " $(i + 1)
		vals[key] = vals[key] (key in vals ? " " : "") $i
	}
	next
}
/^--- (FAIL|SKIP)/ { shown = 1; hdr = $0; once($0); next }
/^--- / { shown = 0; hdr = ""; next }
/^(FAIL|panic:|# )/ || /^[^ \t]+\.go:[0-9]+:[0-9]+: / || (shown && /^[ \t]/) { once($0); next }

END {
	for (b = 1; b <= benches; b++) {
		name = order[b]
		if (bpkg[name] != last) { print "pkg: " bpkg[name]; last = bpkg[name] }
		line = sprintf("%-48s %2d runs", bname[name], runs[name])
		nu = split(units[name], u, " ")
		for (k = 1; k <= nu; k++) line = line sprintf("   %s %s", summary(name SUBSEP u[k]), u[k])
		key = name SUBSEP "ns/op"
		if ((key in lo) && lo[key] > 0 && hi[key] / lo[key] > 1.3) line = line sprintf("   spread %.2fx", hi[key] / lo[key])
		print line
	}
}
