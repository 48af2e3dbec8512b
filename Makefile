# rpr - build, lint and test entry points. `make test` is what CI runs
# (.ci/run); it needs only Go, git and apt-get (for redis-server).
#
#   make test       ensure redis-server, lint, check gen/ for drift, build each
#                   module on its own, go test -race every module and the
#                   bench/ module, then run every fuzz target for
#                   FUZZTIME_TEST (60000 inputs) each
#   make fuzz       every fuzz target for FUZZTIME (1m) each
#   make lint       gofmt check, go vet, staticcheck, buf lint
#   make generate   regenerate gen/ from proto/ (buf + protoc-gen-go + protoc-gen-rpr)
#                   and protoc-gen-rpr's embedded copy of rpr/v1/options.proto
#   make bench      go benchmarks of tunnel/ and internal/oteltest/
#   make demo       the two-network demo (go run ./cmd/rpr demo)
#
# The repository is several Go modules: the runtime (the root), the CLI
# (cmd/rpr) and modules that exist to keep test-only dependencies out of
# the runtime's go.mod. go.work ties them together for development; every
# target covers all of them (MODULES, read from go.work). tools/ and bench/
# are modules too, but stay out of go.work: their dependencies must not
# change the versions the runtime is built and tested with. bench/ has a
# go.work of its own and is linted and tested from it (bench-test), so
# that a change to the runtime that breaks the harness fails here.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test
# Steps depend on each other's side effects (generate rewrites gen/ while
# go test compiles it): never run them in parallel, even under make -j.
.NOTPARALLEL:

GO ?= go
# buf, protoc-gen-go and staticcheck are pinned in tools/go.mod, away from
# the library's go.mod. -modfile cannot be used in workspace mode: tools run
# with GOWORK=off (buf's plugins inherit it, so protoc-gen-rpr is built from
# the runtime's own go.mod).
TOOL := GOWORK=off $(GO) tool -modfile=tools/go.mod
BUF := $(TOOL) buf
TEST_FLAGS ?= -race -count=1 -timeout 12m
# The workspace's modules, as go.work lists them (".", "./cmd/rpr", ...).
MODULES := $(shell $(GO) work edit -json | sed -n 's/^[[:space:]]*"DiskPath": "\(.*\)".*/\1/p')
PKGS ?= $(addsuffix /...,$(MODULES))

# How long `make test` and `make fuzz` run each fuzz target. make test
# counts inputs instead of timing them: with a duration, Go 1.26's fuzz
# coordinator can fail a target at the deadline having found nothing
# (go.dev/issue/75804, fixed in Go 1.27), and a count is the same work on
# a slow machine and a fast one.
FUZZTIME_TEST ?= 60000x
FUZZTIME ?= 1m

.PHONY: test ensure-redis lint fmt-check vet staticcheck buf-lint generate gen-check modules go-test bench-test fuzz-test fuzz bench demo

test: ensure-redis lint gen-check modules go-test bench-test fuzz-test

ensure-redis:
	scripts/ensure-redis.sh

lint: fmt-check vet staticcheck buf-lint

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
	cd bench && $(GO) vet ./...

# staticcheck is built from tools/go.mod (GOWORK=off) and then run in the
# workspace, over every module at once. It skips generated files (gen/).
staticcheck:
	@sc=$$($(TOOL) -n staticcheck); set -x; "$$sc" $(PKGS); cd bench && "$$sc" ./...

buf-lint:
	$(BUF) lint

# protoc-gen-rpr embeds a copy of proto/rpr/v1/options.proto (for
# --export-proto); go generate refreshes it.
generate:
	$(GO) generate ./protoc-gen-rpr
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

# Each module builds and vets from its own go.mod, as it does for a user
# (GOWORK=off: no other module of the workspace fills a gap in it). Then
# the runtime's check: the workspace, which go-test runs in, must select
# for the runtime's packages and tests the very versions the runtime's
# go.mod selects on its own; another module requiring a newer version of
# a shared dependency would otherwise test the runtime with that one.
# (Commands go to a temporary directory: `go build ./...` of a module whose
# only package is a command would write it into the work tree.)
modules:
	@bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	for m in $(MODULES); do \
		echo "+ (cd $$m && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) vet ./...)"; \
		(cd "$$m"; out=(); \
		 if [ -n "$$(GOWORK=off $(GO) list -f '{{if eq .Name "main"}}main{{end}}' ./...)" ]; then out=(-o "$$bin/"); fi; \
		 GOWORK=off $(GO) build "$${out[@]}" ./... && GOWORK=off $(GO) vet ./...); \
	done
	@list='{{with .Module}}{{.Path}} {{.Version}}{{end}}'; \
	alone=$$(GOWORK=off $(GO) list -deps -test -f "$$list" ./... | sort -u); \
	work=$$($(GO) list -deps -test -f "$$list" ./... | sort -u); \
	if [ "$$alone" != "$$work" ]; then \
		echo "go.work selects other versions for the runtime than its go.mod does (< go.mod alone, > go.work):"; \
		diff <(echo "$$alone") <(echo "$$work") || true; \
		echo "raise them in the root go.mod (go get MODULE@VERSION) or lower them in the module that requires them"; \
		exit 1; \
	fi; \
	echo "modules: each builds alone; the runtime's dependency versions are the same in go.work"

go-test:
	$(GO) test $(TEST_FLAGS) $(PKGS)

# bench/'s own tests: each comparison and bench/perf run a few hundred
# calls against a real redis-server, so that the harness issue 18's
# figures come from keeps building and running (about a minute).
bench-test:
	cd bench && $(GO) test $(TEST_FLAGS) ./...

# Native Go fuzz targets (func FuzzX(f *testing.F)) of the decoders that
# read what is in Redis. go test runs their seeds as tests (go-test); these
# fuzz them, one target per run of its package's test binary
# (scripts/fuzz.sh). A failing input is written to testdata/fuzz/FuzzX/ of
# its package: fix the decoder and commit the input as a seed.
fuzz-test:
	GO=$(GO) FUZZTIME=$(FUZZTIME_TEST) scripts/fuzz.sh

fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./tunnel/... ./internal/oteltest/...

demo:
	$(GO) run ./cmd/rpr demo
