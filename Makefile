# berth — see README.md. Every target installs what it needs from the Go
# module proxy (tools are pinned as tool directives in go.mod).

SHELL     := /bin/bash
GO        ?= go
BIN       := build/berth
PKGS      := ./...
# berth's Go modules: the root and sdk/, the plugin SDK, a module of its own
# so a third-party plugin links go-plugin, gRPC and protobuf and nothing of
# the server. ./... in the root does not descend into sdk/, so every target
# below runs in each module.
MODULES   := . sdk
EXAMPLES  := examples/driver-sleep examples/csi-tmpdir
EXAMPLES  += examples/containerd
# Example modules with fuzz targets of their own (decoders of job input).
FUZZ_EXAMPLES := examples/containerd

FUZZTIME  ?= 3s
export CGO_ENABLED ?= 1

.PHONY: all build run test check fuzz-short proto proto-baseline bench acceptance plugins clean fmt browser ui-screenshot

all: build

build:
	$(GO) build -tags '$(BUILD_TAGS)' -o $(BIN) .

# A dev agent: server + client on 127.0.0.1, data in a temp dir removed at exit.
run: build
	./$(BIN) run -dev

# The gate CI runs (.ci/run): make check, then unit, cluster, plugin and
# conformance tests with the race detector plus a short real run of the
# acceptance suite, then a short pass of every fuzz target. Under CI=true a
# test that cannot run on this machine fails instead of skipping.
#
# The module tests run under one private containerd (internal/withcontainerd:
# its own socket, root and state in a temp dir, stopped by PID at the end),
# its socket in BERTH_CONTAINERD_ADDRESS; set that variable to use another
# containerd (the system's) instead.
test: check build containerd-deps browser
	$(GO) run ./internal/withcontainerd -- $(MAKE) --no-print-directory test-modules
	$(MAKE) fuzz-short

# make test's module tests; run through `make test`, which gives them
# containerd.
test-modules:
	for m in $(MODULES); do (cd $$m && $(GO) test -race -timeout 20m $(PKGS)) || exit 1; done
	for m in $(EXAMPLES); do (cd $$m && $(GO) test -race ./...) || exit 1; done

# Every fuzz target of both modules and of FUZZ_EXAMPLES (found at run
# time) for FUZZTIME each.
fuzz-short:
	$(GO) run ./internal/fuzzshort -fuzztime $(FUZZTIME) $(addprefix -C ,$(MODULES) $(FUZZ_EXAMPLES)) $(PKGS)

# The gate's static half; make test runs it first. The sdk and the example
# plugins are modules of their own, checked the same way (staticcheck is the
# binary pinned in the root go.mod, run in theirs).
#
# buf breaking compares the protos with those of the last release
# (PROTO_RELEASE), kept as a buf image in PROTO_BASELINE so the check needs
# neither network nor git history (a shallow or tag-less clone checks the
# same); `make proto-baseline` rewrites the image from the release's tag.
# When main is in the clone and HEAD has branched from it, the protos are
# also compared with that merge base.
# The import rules run last, so a violation leaves every other step's
# result shown.
check:
	@echo "==> gofmt"; out=$$(gofmt -l $$(git ls-files '*.go')) || exit 1; \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@sc=$$($(GO) tool -n staticcheck) && for m in $(MODULES); do \
		echo "==> $$m: go vet, staticcheck, go mod tidy"; \
		(cd $$m && $(GO) vet $(PKGS) && $$sc $(PKGS) && \
		 { $(GO) mod tidy -diff || { echo "$$m: go.mod/go.sum not tidy: run go mod tidy there"; exit 1; }; }) || exit 1; \
	done
	@sc=$$($(GO) tool -n staticcheck) && for m in $(EXAMPLES); do \
		echo "==> $$m: go vet, staticcheck, go mod tidy"; \
		(cd $$m && $(GO) vet ./... && $$sc ./... && \
		 { $(GO) mod tidy -diff || { echo "$$m: go.mod/go.sum not tidy"; exit 1; }; }) || exit 1; \
	done
	@echo "==> buf lint"; $(GO) tool buf lint
	@echo "==> buf breaking against $(PROTO_RELEASE) ($(PROTO_BASELINE))"; \
	 cur=$$(mktemp --suffix=.binpb) && trap 'rm -f "$$cur"' EXIT && $(GO) tool buf build -o "$$cur" && \
	 $(GO) tool buf breaking "$$cur" --against $(PROTO_BASELINE)
	@set -o pipefail; base=; for b in origin/main main; do \
	   git rev-parse -q --verify "$$b^{commit}" >/dev/null && base=$$(git merge-base HEAD "$$b" 2>/dev/null) && break; done; \
	 if [ -z "$$base" ] || [ "$$base" = "$$(git rev-parse HEAD)" ]; then echo "==> buf breaking against main's merge base: none in this clone (HEAD is main, or main is absent)"; exit 0; fi; \
	 echo "==> buf breaking against main's merge base $$(git rev-parse --short $$base)"; \
	 old=$$(mktemp -d) && trap 'rm -rf "$$old"' EXIT && \
	 git archive "$$base" -- buf.yaml rpc/proto sdk/proto | tar -x -C "$$old" && \
	 $(GO) tool buf build "$$old" -o "$$old/base.binpb" && $(GO) tool buf build -o "$$old/head.binpb" && \
	 $(GO) tool buf breaking "$$old/head.binpb" --against "$$old/base.binpb"
	@echo "==> generated code"; sums() { git ls-files -co --exclude-standard '*.pb.go' | sort | xargs sha256sum; }; \
		before=$$(sums) && $(MAKE) -s proto && after=$$(sums) || exit 1; \
		if [ "$$before" != "$$after" ]; then diff <(echo "$$before") <(echo "$$after"); \
		echo "generated code is stale: make proto changed the files above; commit them"; exit 1; fi
	@echo "==> import rules"; $(GO) run ./internal/importcheck .

proto:
	$(GO) tool buf generate

# The protos of the last release, as a buf image: what make check's buf
# breaking holds the current protos to. Rewrite it when a release is tagged.
PROTO_RELEASE  := v0.1.0-dev.3
PROTO_BASELINE := rpc/proto/release.binpb
proto-baseline:
	old=$$(mktemp -d) && trap 'rm -rf "$$old"' EXIT && \
	git archive $(PROTO_RELEASE) -- buf.yaml rpc/proto sdk/proto | tar -x -C "$$old" && \
	$(GO) tool buf build "$$old" -o $(PROTO_BASELINE)

# Example third-party plugins, each its own Go module, into build/plugins/
# (usable as an agent's plugin_dir): drivers at its top, storage adapters
# in its csi/ subdirectory.
plugins:
	mkdir -p build/plugins/csi
	cd examples/driver-sleep && $(GO) build -o ../../build/plugins/sleep .
	cd examples/csi-tmpdir && $(GO) build -o ../../build/plugins/csi/tmpdir .
	cd examples/containerd && $(GO) build -o ../../build/plugins/containerd .

bench: build containerd-deps
	$(GO) build -o build/nodesim ./bench/nodesim
	$(GO) run ./bench

acceptance: build
	BERTH_ACCEPTANCE_LONG=1 $(GO) test -race -count=1 -timeout 60m ./acceptance/...

clean:
	rm -rf build

.PHONY: test-modules containerd-deps

# containerd and runc for the containerd driver's tests: Debian's packages,
# installed when a binary is missing (as root; without root the tests that
# need them skip, and under CI=true that fails here).
containerd-deps:
	@if command -v containerd >/dev/null && command -v runc >/dev/null && command -v ctr >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
		echo "==> installing containerd and runc (Debian)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y --no-install-recommends containerd runc; \
	elif [ "$$CI" = true ]; then \
		echo "containerd-deps: containerd or runc is missing and installing them needs root (CI=true: the containerd tests must run)"; exit 1; \
	else \
		echo "containerd-deps: containerd or runc is missing and installing them needs root: the containerd tests will be skipped"; \
	fi

# Headless Chromium for the web UI's browser tests (host/ui, acceptance's
# TestWebUIInABrowser, which look for /usr/bin/chromium): Debian's
# chromium, installed with apt when missing, as root only. Under CI=true a
# machine where it cannot be installed fails; elsewhere the tests skip,
# saying why.
browser:
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	ci=false; case "$$CI" in true|TRUE|True|1|t|T) ci=true;; esac; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing chromium (apt-get)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends chromium || \
		{ apt-get update && apt-get install -y --no-install-recommends chromium; } || \
		{ echo "chromium: apt-get install failed"; if $$ci; then exit 1; fi; }; \
	elif $$ci; then echo "chromium is missing and cannot be installed here (needs root and apt-get); CI=true: failing"; exit 1; \
	else echo "chromium is missing (installing needs root and apt-get): the browser tests will skip"; fi

# The README's picture of the volume page, from a run of the browser test.
ui-screenshot: browser
	BERTH_UI_SCREENSHOT=$(CURDIR)/docs/ui-volume.png $(GO) test -count=1 -run TestWebUIInABrowser ./acceptance

# The randomized fault suite (acceptance/chaos, root): RUNS runs from seed
# SEED (random when unset), FAULTS faults each; the figures go to
# build/chaos-figures.txt. `make test` runs one short run of it.
RUNS   ?= 1
FAULTS ?= 6
.PHONY: chaos
chaos: build
	mkdir -p build
	set -o pipefail; BERTH_BIN=$(abspath $(BIN)) BERTH_CHAOS_SEED=$(SEED) BERTH_CHAOS_RUNS=$(RUNS) BERTH_CHAOS_FAULTS=$(FAULTS) \
	BERTH_CHAOS_FIGURES=$(abspath build/chaos-figures.txt) \
		$(GO) test -count=1 -timeout 0 -run 'TestChaos$$' -v ./acceptance/chaos/ | grep -v '^        20'

# The node simulator (bench/nodesim) against real servers it starts:
# `make nodesim NODES=5000 SERVERS=3 NODESIM_FLAGS="-job-allocs 10000"`.
NODES   ?= 1000
SERVERS ?= 3
.PHONY: nodesim
nodesim: build
	$(GO) run ./bench/nodesim -bin build/berth -nodes $(NODES) -servers $(SERVERS) $(NODESIM_FLAGS)

# Build tags of the berth binary (make build, and so make bench, make test
# and CI). urfave_cli_no_docs leaves the CLI framework's man-page/markdown
# generator (go-md2man, blackfriday) out: berth never generates docs, and
# its package initialisation was part of every command's start-up (issue
# 26). `go build .` without it builds the same CLI, only slower to start;
# TestStartup (main package) checks the tags here leave the generator out.
# netgo and osusergo leave cgo out, so berth is linked statically: no
# dynamic loader and C library start-up in any berth process (~1 ms, ~9% of
# `berth version`). cgo stays enabled (CGO_ENABLED); a task's user is still
# looked up through NSS, by getent (taskexec.LookupUser). Host names are
# resolved by Go's own resolver (/etc/hosts, then DNS), which Go picks on
# Linux anyway unless nsswitch.conf names a hosts source beyond those.
# grpcnotrace leaves out gRPC's request tracing (golang.org/x/net/trace),
# which berth never turns on and whose package set-up every process paid.
BUILD_TAGS ?= urfave_cli_no_docs,netgo,osusergo,grpcnotrace
