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

FUZZTIME  ?= 3s
export CGO_ENABLED ?= 1

.PHONY: all build run test check fuzz-short proto bench acceptance plugins clean fmt

all: build

build:
	$(GO) build -o $(BIN) .

# A dev agent: server + client on 127.0.0.1, data in a temp dir removed at exit.
run: build
	./$(BIN) run -dev

# The gate CI runs (.ci/run): make check, then unit, cluster, plugin and
# conformance tests with the race detector plus a short real run of the
# acceptance suite, then a short pass of every fuzz target. Under CI=true a
# test that cannot run on this machine fails instead of skipping.
test: check build
	for m in $(MODULES); do (cd $$m && $(GO) test -race -timeout 20m $(PKGS)) || exit 1; done
	for m in $(EXAMPLES); do (cd $$m && $(GO) test -race ./...) || exit 1; done
	$(MAKE) fuzz-short

# Every fuzz target of both modules (found at run time) for FUZZTIME each.
fuzz-short:
	$(GO) run ./internal/fuzzshort -fuzztime $(FUZZTIME) $(addprefix -C ,$(MODULES)) $(PKGS)

# The gate's static half; make test runs it first. The sdk and the example
# plugins are modules of their own, checked the same way (staticcheck is the
# binary pinned in the root go.mod, run in theirs).
#
# buf breaking compares the protos with the newest v* tag reachable from
# HEAD, else with the commit HEAD branched from main (origin/main in a fresh
# clone, else main). The old protos come out of git (git archive), so it
# needs no network and works in a clone or a worktree alike. On main itself
# with no tag, HEAD is its own base and the check is trivially true.
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
	@set -o pipefail; main=; \
	 if ref=$$(git describe --tags --abbrev=0 --match 'v*' HEAD 2>/dev/null); then why="newest v* tag reachable from HEAD"; \
	 else for b in origin/main main; do git rev-parse -q --verify "$$b^{commit}" >/dev/null && main=$$b && break; done; \
	      [ -n "$$main" ] && ref=$$(git merge-base HEAD "$$main") || \
	      { echo "buf breaking: no v* tag, and no origin/main or main to find the merge base with"; exit 1; }; \
	      why="merge base of HEAD and $$main, no v* tag"; fi; \
	 if [ "$$(git rev-parse "$$ref^{commit}")" = "$$(git rev-parse HEAD)" ]; then why="$$why; it is HEAD itself, so trivially true"; fi; \
	 echo "==> buf breaking against $$(git rev-parse --short "$$ref^{commit}")$$([ "$$ref" != "$$(git rev-parse "$$ref^{commit}")" ] && echo " $$ref") ($$why)"; \
	 old=$$(mktemp -d) && trap 'rm -rf "$$old"' EXIT && \
	 git archive "$$ref" -- buf.yaml rpc/proto sdk/proto | tar -x -C "$$old" && \
	 $(GO) tool buf breaking --against "$$old"
	@echo "==> generated code"; sums() { git ls-files -co --exclude-standard '*.pb.go' | sort | xargs sha256sum; }; \
		before=$$(sums) && $(MAKE) -s proto && after=$$(sums) || exit 1; \
		if [ "$$before" != "$$after" ]; then diff <(echo "$$before") <(echo "$$after"); \
		echo "generated code is stale: make proto changed the files above; commit them"; exit 1; fi
	@echo "==> import rules"; $(GO) run ./internal/importcheck .

proto:
	$(GO) tool buf generate

# Example third-party plugins, each its own Go module, into build/plugins/
# (usable as an agent's plugin_dir): drivers at its top, storage adapters
# in its csi/ subdirectory.
plugins:
	mkdir -p build/plugins/csi
	cd examples/driver-sleep && $(GO) build -o ../../build/plugins/sleep .
	cd examples/csi-tmpdir && $(GO) build -o ../../build/plugins/csi/tmpdir .

bench: build
	$(GO) run ./bench

acceptance: build
	BERTH_ACCEPTANCE_LONG=1 $(GO) test -race -count=1 -timeout 60m ./acceptance/...

clean:
	rm -rf build
