# The project's build tasks. `make help` lists them.
# Code generators and linters are pinned here and installed into .bin/ from
# the Go module proxy on first use.

SHELL := /bin/bash
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
GOLANGCI_LINT_VERSION := v2.15.0

.PHONY: help build envd cross generate checkgenerate lint test bench fuzz interop clean

help: ## list the tasks
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

# The lean envd that sandbox-mcp embeds (envd/envdbin): static, for
# every Linux architecture in ENVD_ARCHS, built reproducibly (the same flags
# as envdtest.BuildLean, which the envdbin test compares against).
ENVD_DIR := envd/envdbin/bin
ENVD_ARCHS := amd64 arm64
ENVD_BUILD := CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags='-s -w'

build: envd ## build ./sandbox-mcp, carrying the lean envd its sandboxes run
	go build -o sandbox-mcp .

envd: ## build the lean envd for Linux into envd/envdbin/bin (embedded by the next build)
	@for arch in $(ENVD_ARCHS); do \
		echo "$(ENVD_BUILD) -o $(ENVD_DIR)/sandbox-envd-linux-$$arch ./envd/cmd/sandbox-envd  # GOARCH=$$arch"; \
		GOARCH=$$arch $(ENVD_BUILD) -o $(ENVD_DIR)/sandbox-envd-linux-$$arch ./envd/cmd/sandbox-envd || exit 1; \
	done

# The server for the systems it cross-builds for: macOS and Windows, each
# carrying the lean Linux envds (for sandboxes that are Linux machines
# elsewhere). The local provider needs Linux, so these binaries have no
# provider that works yet; see README.
DIST_DIR := dist
CROSS_TARGETS := darwin/arm64 darwin/amd64 windows/amd64

cross: envd ## build sandbox-mcp for macOS (arm64, amd64) and Windows (amd64) into dist/
	@for target in $(CROSS_TARGETS); do \
		os=$${target%/*}; arch=$${target#*/}; ext=; [[ $$os == windows ]] && ext=.exe; \
		out=$(DIST_DIR)/sandbox-mcp-$$os-$$arch$$ext; \
		echo "CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -o $$out ."; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -o $$out . || exit 1; \
	done

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-connect-go:
	GOBIN=$(BIN) go install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
$(BIN)/golangci-lint:
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

generate: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go ## regenerate proto/ Go code
	cd proto && buf generate

checkgenerate: generate ## fail if generated code differs from what is committed
	@test -z "$$(git status --porcelain -- proto)" || { git status --porcelain -- proto; git diff -- proto | head -50; echo "generated code drifted: run make generate and commit"; exit 1; }

lint: $(BIN)/golangci-lint ## gofmt, go vet, golangci-lint, go mod tidy
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	go vet ./...
	go vet -tags testhooks . ./tools/
	golangci-lint run ./...
	golangci-lint run --build-tags testhooks . ./tools/
	go mod tidy -diff

test: envd ## go test -race ./... (with the lean envd built and embedded first)
	go test -race -timeout 20m ./...

bench: ## benchmarks with ratios against same-run baselines
	scripts/bench

fuzz: ## run every fuzz target for a short while
	scripts/fuzz

interop: build ## third-party clients (npm) against the built binary
	scripts/interop

clean:
	rm -rf $(BIN) sandbox-mcp $(DIST_DIR) $(ENVD_DIR)/sandbox-envd-*
