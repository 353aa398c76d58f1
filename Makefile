# weightsnap: the two commands that matter are `make demo` and `make test`.
GO      ?= go
BIN     := bin
PEERS   ?= $(HOME)/.cache/weightsnap/peers
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: all build test unit e2e bench fuzz lint demo stress clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Unit tests, fuzz seed corpora, crash harness and end-to-end tests against the real peers.
test: build
	$(GO) test -count=1 -timeout 30m ./...

unit:
	$(GO) test -count=1 -short ./...

e2e: build
	$(GO) test -count=1 -timeout 30m ./test/...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

FUZZTIME ?= 30s
fuzz:
	@set -e; for t in $$($(GO) test -list '^Fuzz' ./artifact/ | grep ^Fuzz); do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./artifact/; done

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

demo: build
	./scripts/demo.sh

clean:
	rm -rf $(BIN)
