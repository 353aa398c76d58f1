# Filters `go test -v` output for make test: prints the summary lines
# (crash and power-cut harness counts, each top-level test's result, ok, FAIL, panics)
# and, for a test that fails or skips, every line it logged, so the reason
# shows; the logs of passing tests are dropped.
/^=== RUN / && $3 !~ /\// { buf = ""; failed = 0; next }
/^=== (RUN|PAUSE|CONT|NAME) / { next }
/^(crash harness|power-cut harness|ok|FAIL|panic)/ { print; fflush(); next }
/^ *--- FAIL/ { printf "%s", buf; buf = ""; print; failed = 1; next }
/^ *--- SKIP/ { printf "%s", buf; buf = ""; print; next }
/^--- PASS/ { buf = ""; print; next }
/^ *--- PASS/ { next }
{ buf = buf $0 "\n"; if (failed) { printf "%s", buf; buf = "" } }
END { printf "%s", buf }
