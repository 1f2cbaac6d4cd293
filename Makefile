# bam for Go. `make help` lists the targets.
GO        ?= go
NVCC      ?= nvcc
BUNDLE    ?= .gpubundle
PKGS      := ./...

.PHONY: help test vet demo kernels generate gpu-bundle gpu-test bench-cpu fmt

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: vet ## vet, race-checked tests, example smoke runs (CPU only; GPU tests skip)
	$(GO) test -race -timeout 45m $(PKGS)

vet: ## go vet and gofmt check
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo: ## run the main job (GPU when present, else CPU) on a file-backed store
	$(GO) run ./cmd/bam demo

fmt: ## format the Go sources
	gofmt -w $$(git ls-files '*.go')
