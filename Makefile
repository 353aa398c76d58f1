# weightsnap: the two commands that matter are `make demo` and `make test`.
SHELL   := bash
GO      ?= go
BIN     := bin
PEERS   ?= $(HOME)/.cache/weightsnap/peers
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: all build image test unit e2e bench fuzz lint demo stress clean

all: build

# -buildvcs=auto stamps the commit `weightsnap version` prints, even where GOFLAGS says -buildvcs=false.
build:
	$(GO) build -buildvcs=auto -o $(BIN)/ ./cmd/...

# weightsnapd's container image (contrib/kubernetes/weightsnapd.yaml), built by ko without a Docker
# daemon and pushed to IMAGE_REPO as IMAGE_REPO:IMAGE_TAG (the pushed reference, with its digest, is
# the last line). ko runs pinned from the Go module proxy. Reproducible: same source and base image,
# same digest (ko sets every time to SOURCE_DATE_EPOCH, 0 by default; -trimpath; no SBOM). The daemon
# lands at /ko-app/weightsnapd, the image's entrypoint, and runs as root (it mounts); BASE_IMAGE is
# ko's own default (static, with CA certificates; pin it by digest for a fixed image). A plain-HTTP
# registry: KO_FLAGS=--insecure-registry.
KO_VERSION  := v0.19.1
KO          ?= $(GO) run github.com/google/ko@$(KO_VERSION)
BASE_IMAGE  ?= cgr.dev/chainguard/static:latest
IMAGE_TAG   ?= latest
IMAGE_ARCH  ?= $(shell $(GO) env GOARCH)
KO_FLAGS    ?=
SOURCE_DATE_EPOCH ?= 0
image:
	@test -n "$(IMAGE_REPO)" || { echo 'make image: set IMAGE_REPO, the repository to push to (IMAGE_REPO=registry.example/weightsnap/weightsnapd)' >&2; exit 2; }
	KO_DOCKER_REPO='$(IMAGE_REPO)' KO_DEFAULTBASEIMAGE='$(BASE_IMAGE)' SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
		GOFLAGS="$$GOFLAGS -buildvcs=auto" \
		$(KO) build --bare --platform linux/$(IMAGE_ARCH) --image-user 0 --sbom none \
		--tags '$(IMAGE_TAG)' $(KO_FLAGS) ./cmd/weightsnapd

# Installs the pinned real peers (test/e2e/deps; cached, seconds when nothing changed) and hands
# their bin directory to the tests. If that fails (no network, ...) the end-to-end tests skip, unless
# WEIGHTSNAP_REQUIRE_ALL=1 (CI), where it is fatal. Without root, deps skips apt and root tests skip.
PEERS_DEPS = if bin=$$(WEIGHTSNAP_PEERS="$${WEIGHTSNAP_PEERS:-$(PEERS)}" test/e2e/deps); then \
		export WEIGHTSNAP_PEERS_BIN="$${WEIGHTSNAP_PEERS_BIN:-$$bin}"; \
	elif [ "$${WEIGHTSNAP_REQUIRE_ALL:-}" = 1 ]; then echo "peers: install failed" >&2; exit 1; \
	else echo "peers: install failed; end-to-end tests will skip" >&2; fi

# REFERENCE_TAGS builds containers/image, whose trust decision the unit and end-to-end tests
# run beside weightsnap's, without cgo's gpgme.
REFERENCE_TAGS = containers_image_openpgp

# Unit tests (with the race detector) and fuzz seed corpora, crash and power-cut harnesses and
# end-to-end tests against the real peers. The harnesses run verbose, filtered
# (scripts/test-filter.awk), so their counts of kills and power cuts show, and so does everything a
# failing test logged. The weight peer is tested again with its rma plane (build tag libfabric: cgo
# and libfabric-dev, which test/e2e/deps installs).
test: build
	@$(PEERS_DEPS); \
	$(GO) test -count=1 -race -timeout 30m -tags $(REFERENCE_TAGS) $$($(GO) list ./... | grep -v '/test/') && \
	$(GO) test -count=1 -timeout 30m -tags $(REFERENCE_TAGS) $$($(GO) list ./test/... | grep -vE '/test/(crash|powercut)') && \
	$(LIBFABRIC_TEST) && \
	$(GO) test -count=1 -timeout 20m -v ./test/crash/... ./test/powercut/... 2>&1 | awk -f scripts/test-filter.awk; \
	exit $${PIPESTATUS[0]}

LIBFABRIC_TEST = if pkg-config --exists libfabric 2>/dev/null; then \
		$(GO) test -count=1 -timeout 20m -tags libfabric ./peer/...; \
	elif [ "$${WEIGHTSNAP_REQUIRE_ALL:-}" = 1 ]; then echo "libfabric-dev missing: cannot test the rma plane" >&2; false; \
	else echo "libfabric-dev missing: the rma plane (go test -tags libfabric ./peer/...) is not tested" >&2; fi

unit:
	$(GO) test -count=1 -short -tags $(REFERENCE_TAGS) ./...

e2e: build
	@$(PEERS_DEPS); \
	$(GO) test -count=1 -timeout 30m -tags $(REFERENCE_TAGS) ./test/...

# The hashing floor and the disk floor of this machine first, then the side-by-side comparisons
# with the real tools (tables with ratios to the floor and to the tools), then the Go benchmarks;
# every row is the median of BENCH_REPS runs (5 by default) with its min and max.
# As root, every contender starts from an empty page cache (DROP_CACHES=0 keeps it): on a virtual
# machine the pages an earlier contender freed cost the next one a fault to the host each.
BENCH_SIZE ?= 2GiB
ifndef DROP_CACHES
DROP_CACHES := $(if $(filter 0,$(shell id -u)),1,0)
endif
export DROP_CACHES
bench: build
	@bash -c '. scripts/bench-lib.sh && hash_floor && echo "$$floor_line" && disk_floor_line $(BENCH_SIZE) && echo "$$disk_line"'
	scripts/bench-store.sh $(BENCH_SIZE) 8
	scripts/bench-oci.sh $(BENCH_SIZE) 8 5
	scripts/bench-peer.sh $(BENCH_SIZE) 8
	scripts/bench-fleet.sh
	scripts/bench-snapshotter.sh 2GiB 4GiB
	set -o pipefail; $(GO) test -tags bench -count=1 -timeout 60m -v -run '^TestColdPrepareBench$$' ./test/e2e/ | grep -E "^(cold start|[0-9]+ cores, median|hashing floor|receive floor|weights |[0-9.]+[KMGT]iB |goals:|runs |--- )"
	set -o pipefail; $(GO) test -tags bench -count=1 -v -run '^TestWriteFloorBench$$' ./store/ | grep -E "^(write|buffered|O_DIRECT|runs |--- )"
	set -o pipefail; $(GO) test -tags bench -count=1 -v -run '^TestWarmPrepareBench$$' ./snapshotter/ 2>/dev/null | grep -E "^(warm Prepare|p50 and p99| *files| +[0-9]+ |weight:|container:|CPU:|--- | +warm_bench_test\.go:)"
	set -o pipefail; $(GO) test -tags bench -count=1 -v -run '^TestCRIProxyLatency$$' ./test/e2e/ | grep -E "^(weightsnapd's CRI|call|ImageStatus|ListImages|--- )"
	set -o pipefail; $(GO) test -tags bench -count=1 -timeout 60m -v -run '^TestKubeletImageVolumeBench$$' ./test/e2e/ | grep -E "^(kubelet static pod|[0-9]+ cores, median|ratios:|weights |[0-9.]+[KMGT]iB |goal:|runs |--- | +kubelet_bench_test\.go:)"
	scripts/bench-staging.sh $(BENCH_SIZE) 1000
	set -o pipefail; $(GO) test -tags bench -count=1 -v -run '^TestModelSwitchingBench$$' ./evict/ | grep -E "^(model switching|median| +[a-z0-9]|--- )"
	GO='$(GO)' scripts/bench-go.sh ./...

FUZZTIME ?= 30s
# Each new interesting input is minimized for at most this many runs: with Go's default (60 s per
# input) a target whose cached corpus keeps yielding inputs spends its whole FUZZTIME minimizing
# and runs a few hundred inputs ("execs: N (0/sec)" for seconds on end).
FUZZMINIMIZE ?= 100x
FUZZPKGS := ./artifact/ ./artifact/blake3/ ./artifact/tpsplit/ ./store/ ./pointer/ ./layout/hfcache/ ./oci/ ./peer/internal/wire/ ./staging/
fuzz:
	@set -e; for p in $(FUZZPKGS); do for t in $$($(GO) test -list '^Fuzz' $$p | grep ^Fuzz); do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$p; done; done

# The crash harness with ten times the kills per fault point; the power-cut harness's random
# subsets with ten times the seeds.
stress:
	WEIGHTSNAP_CRASH_ITERATIONS=200 $(GO) test -count=1 -timeout 60m -v -run KillAt ./test/crash/
	WEIGHTSNAP_POWERCUT_SEEDS=20 $(GO) test -count=1 -timeout 60m -v -run RandomSubsets ./test/powercut/

# go vet and staticcheck, without build tags and under each tag the files use, then gofmt and
# goimports (scripts/lint.sh; docs/style.md says what they hold the code to). The linters run
# pinned from the Go module proxy.
STATICCHECK_VERSION := v0.8.2
GOIMPORTS_VERSION   := v0.53.0
lint:
	GO='$(GO)' STATICCHECK='$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)' \
		GOIMPORTS='$(GO) run golang.org/x/tools/cmd/goimports@$(GOIMPORTS_VERSION)' scripts/lint.sh

demo: build
	./scripts/demo.sh

clean:
	rm -rf $(BIN)
