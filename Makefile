# berth — see README.md. Every target installs what it needs from the Go
# module proxy (tools are pinned as tool directives in go.mod).

GO        ?= go
BIN       := build/berth
PKGS      := ./...
export CGO_ENABLED ?= 1

.PHONY: all build run test check proto bench acceptance plugins clean fmt

all: build

build:
	$(GO) build -o $(BIN) .

# A dev agent: server + client on 127.0.0.1, data in a temp dir removed at exit.
run: build
	./$(BIN) run -dev

# Unit, cluster, plugin and conformance tests with the race detector, plus a
# short real run of the acceptance suite.
test: build
	$(GO) test -race -timeout 20m $(PKGS)
	cd examples/driver-sleep && $(GO) test -race ./...

check:
	@echo "==> gofmt"; out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^examples/')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@echo "==> go vet"; $(GO) vet $(PKGS)
	@echo "==> staticcheck"; $(GO) tool staticcheck $(PKGS)
	@echo "==> import rules"; $(GO) run ./internal/importcheck .
	@echo "==> go mod tidy"; $(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }
	@echo "==> generated code"; $(MAKE) -s proto; \
		if [ -n "$$(git status --porcelain -- '*.pb.go')" ]; then git status --porcelain -- '*.pb.go'; \
		echo "generated code is stale: run make proto and commit"; exit 1; fi

proto:
	$(GO) tool buf generate

# Example third-party plugins, each its own Go module, into build/plugins/
# (usable as an agent's plugin_dir).
plugins:
	mkdir -p build/plugins
	cd examples/driver-sleep && $(GO) build -o ../../build/plugins/sleep .

bench: build
	$(GO) run ./internal/bench

acceptance: build
	BERTH_ACCEPTANCE_LONG=1 $(GO) test -race -count=1 -timeout 60m ./acceptance/...

clean:
	rm -rf build
