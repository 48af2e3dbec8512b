# rpr - build, lint and test entry points. `make test` is what CI runs
# (.ci/run); it needs only Go, git and apt-get (for redis-server).
#
#   make test       ensure redis-server, lint, check gen/ for drift, go test -race
#   make lint       gofmt check, go vet, buf lint
#   make generate   regenerate gen/ from proto/ (buf + protoc-gen-go + protoc-gen-rpr)
#   make bench      go benchmarks of tunnel/
#   make demo       the two-network demo (go run ./cmd/rpr demo)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
# Steps depend on each other's side effects (generate rewrites gen/ while
# go test compiles it): never run them in parallel, even under make -j.
.NOTPARALLEL:

GO ?= go
# buf and protoc-gen-go are pinned in tools/go.mod, away from the library's go.mod.
BUF := $(GO) tool -modfile=tools/go.mod buf
TEST_FLAGS ?= -race -count=1 -timeout 12m
PKGS ?= ./...

.PHONY: test ensure-redis lint fmt-check vet buf-lint generate gen-check go-test bench demo

test: ensure-redis lint gen-check go-test

ensure-redis:
	scripts/ensure-redis.sh

lint: fmt-check vet buf-lint

# Every .go file git knows of, or would add (tracked + untracked, not ignored).
fmt-check:
	@files=$$(git ls-files --cached --others --exclude-standard -- '*.go' | while read -r f; do [ ! -f "$$f" ] || echo "$$f"; done); \
	bad=$$([ -z "$$files" ] || gofmt -l $$files); \
	if [ -n "$$bad" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$bad"; exit 1; \
	fi; \
	echo "gofmt: ok"

vet:
	$(GO) vet $(PKGS)

buf-lint:
	$(BUF) lint

generate:
	$(BUF) generate

# gen/ is committed; CI regenerates it and fails if anything changed.
gen-check: generate
	@if [ -n "$$(git status --porcelain -- gen/)" ]; then \
		echo "gen/ is out of date with proto/ or the plugins:"; \
		git status --porcelain -- gen/; \
		git --no-pager diff --stat -- gen/; \
		git --no-pager diff -- gen/ | head -n 200; \
		echo "run \`make generate\` and commit gen/"; \
		exit 1; \
	fi; \
	echo "gen/: no drift"

go-test:
	$(GO) test $(TEST_FLAGS) $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./tunnel/...

demo:
	$(GO) run ./cmd/rpr demo
