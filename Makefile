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

.PHONY: all build run test check fuzz-short proto proto-baseline bench acceptance plugins clean fmt

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

bench: build
	$(GO) build -o build/nodesim ./bench/nodesim
	$(GO) run ./bench

acceptance: build
	BERTH_ACCEPTANCE_LONG=1 $(GO) test -race -count=1 -timeout 60m ./acceptance/...

clean:
	rm -rf build

# The node simulator (bench/nodesim) against real servers it starts:
# `make nodesim NODES=5000 SERVERS=3 NODESIM_FLAGS="-job-allocs 10000"`.
NODES   ?= 1000
SERVERS ?= 3
.PHONY: nodesim
nodesim: build
	$(GO) run ./bench/nodesim -bin build/berth -nodes $(NODES) -servers $(SERVERS) $(NODESIM_FLAGS)
