#!/usr/bin/env bash
# scripts/lint.sh: make lint's checks. go vet and staticcheck run without build tags and under each
# tag the //go:build lines name; gofmt and goimports check every tracked Go file. Every check runs,
# and the exit status is 1 when any of them found something.
#
# The Makefile passes the pinned linters as commands: STATICCHECK and GOIMPORTS.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
: "${STATICCHECK:?set STATICCHECK, the staticcheck command (make lint does)}"
: "${GOIMPORTS:?set GOIMPORTS, the goimports command (make lint does)}"

failed=0
check() {
	echo "+ $*" >&2
	"$@" || failed=1
}
# listed runs a lister (gofmt, goimports) with -l over the tracked Go files, and fails when it
# names one.
listed() {
	local out
	echo "+ $* -l (the tracked Go files)" >&2
	out=$("$@" -l "${files[@]}") || failed=1
	if [[ -n $out ]]; then
		echo "$out"
		failed=1
	fi
}

# The build tags the //go:build lines name, and the packages with files behind each.
tags=$(git grep -h '^//go:build' -- '*.go' | sed 's|^//go:build||' | grep -oE '[[:alnum:]_]+' | sort -u)
tagged() { git grep -lE "^//go:build.*\\b$1\\b" -- '*.go' | xargs -n1 dirname | sort -u | sed 's|^|./|'; }

# The libfabric tag's files need cgo and libfabric-dev (test/e2e/deps installs it).
if grep -qx libfabric <<<"$tags" && ! pkg-config --exists libfabric 2>/dev/null; then
	if [[ ${WEIGHTSNAP_REQUIRE_ALL:-} == 1 ]]; then
		echo "lint: libfabric-dev missing: cannot check the libfabric tag's files" >&2
		exit 1
	fi
	echo "lint: libfabric-dev missing: the libfabric tag's files are not checked" >&2
	tags=$(grep -vx libfabric <<<"$tags")
fi

check $GO vet ./...
for t in $tags; do
	check $GO vet -tags "$t" $(tagged "$t")
done

# One staticcheck run over a matrix of the untagged build and one build per tag. Its findings are
# merged: code unused in one build but used in another is not reported.
matrix=$(echo 'default:'; for t in $tags; do echo "$t: -tags=$t"; done)
check $STATICCHECK -matrix ./... <<<"$matrix"

mapfile -t files < <(git ls-files '*.go')
listed gofmt
listed $GOIMPORTS

exit $failed
