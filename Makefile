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

.PHONY: help build generate checkgenerate lint test bench fuzz interop clean

help: ## list the tasks
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build ./sandbox-mcp
	go build -o sandbox-mcp .

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
	golangci-lint run ./...
	go mod tidy -diff

test: ## go test -race ./...
	go test -race -timeout 20m ./...

bench: ## benchmarks with ratios against same-run baselines
	scripts/bench

fuzz: ## run every fuzz target for a short while
	scripts/fuzz

interop: build ## third-party clients (npm) against the built binary
	scripts/interop

clean:
	rm -rf $(BIN) sandbox-mcp
