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
	$(GO) test -count=1 ./gpucache ./internal/cpuengine ./array # the lock-free read path runs only without -race
	$(GO) run ./examples/graph demo --scale 14 --engine cpu
	@d=$$(mktemp -d) && trap 'rm -rf '"$$d" EXIT && \
	  $(GO) run ./examples/analytics gen --store $$d/taxi --rows 200K && \
	  $(GO) run ./examples/analytics query --store $$d/taxi --engine cpu --q q1 && \
	  $(GO) run ./cmd/bam kv bench --threads 2 --duration 200ms --factor 2 --cache 4MiB --out "" >/dev/null && echo "kv bench smoke run: ok"

vet: ## go vet and gofmt check
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo: ## generate a scale-20 Kronecker graph into a store, then BFS and CC (GPU when present, else CPU)
	$(GO) run ./examples/graph demo

fmt: ## format the Go sources
	gofmt -w $$(git ls-files '*.go')

# ---- CUDA kernels and the GPU test bundle ----------------------------------
# `make kernels` needs nvcc >= 11.8 (shared/tools/install-nvcc.sh installs it);
# building and testing the Go code never does. `make gpu-bundle` cross-builds
# nothing: it packs this machine's binaries for a GPU host with no Go
# toolchain, where `make gpu-test` (or scripts/gpu-test.sh) runs them.
NVCCFLAGS   ?= -ptx -arch=compute_80 -lineinfo -std=c++17
# The second set, loaded on compute capability 9.0 and later, reads
# completion windows with sm_90 bulk copies (bam/detail/sync.cuh), which
# need PTX ISA 8.0: nvcc 11.8 writes 7.8, so its version line is raised
# (every 7.x construct means the same under 8.0).
NVCCFLAGS90 ?= -ptx -arch=compute_90 -lineinfo -std=c++17 -DBAM_PTX_ISA_80
KERNEL_SRCS := $(sort $(wildcard kernels/*.cu))
GPU_PKGS    := $(sort $(patsubst %/,%,$(dir $(shell find . -name gpu_test.go -not -path './.*' 2>/dev/null))))

kernels: ## compile kernels/*.cu to kernels/ptx/*.ptx and kernels/ptx/sm_90/*.ptx with nvcc and refresh kernels/ptx/MANIFEST
	@command -v $(NVCC) >/dev/null || { echo "kernels: $(NVCC) not found (bash ../shared/tools/install-nvcc.sh)"; exit 1; }
	@v=$$($(NVCC) --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p'); set -- $$v; \
	  if [ "$${1:-0}" -lt 11 ] || { [ "$$1" -eq 11 ] && [ "$$2" -lt 8 ]; }; then echo "kernels: need nvcc >= 11.8, have $$1.$$2"; exit 1; fi
	@mkdir -p kernels/ptx/sm_90
	@rm -f kernels/ptx/*.ptx kernels/ptx/sm_90/*.ptx
	@set -e; for src in $(KERNEL_SRCS); do \
	  out=kernels/ptx/$$(basename $$src .cu).ptx; echo "  NVCC $$src -> $$out"; \
	  $(NVCC) $(NVCCFLAGS) -Ikernels/include -o $$out $$src; \
	  sed -i 's|"$(CURDIR)/kernels/|"kernels/|' $$out; \
	  out=kernels/ptx/sm_90/$$(basename $$src .cu).ptx; echo "  NVCC $$src -> $$out"; \
	  $(NVCC) $(NVCCFLAGS90) -Ikernels/include -o $$out $$src; \
	  sed -i 's|"$(CURDIR)/kernels/|"kernels/|; s|^\.version 7\.[0-9]*$$|.version 8.0|' $$out; \
	done
	@deps=$$(for src in $(KERNEL_SRCS); do $(NVCC) -M -std=c++17 -Ikernels/include $$src; done \
	  | tr -d '\\' | tr ' ' '\n' | grep '^kernels/include/' | sed 's|^kernels/||' | LC_ALL=C sort -u); \
	cd kernels && { \
	  echo "# SHA-256 of every source, included header and PTX file of the last make kernels;"; \
	  echo "# checked by TestManifestCurrent. $$($(NVCC) --version | tail -1); flags: $(NVCCFLAGS); sm_90/: $(NVCCFLAGS90)"; \
	  sha256sum $$(ls *.cu) $$deps $$(ls ptx/*.ptx ptx/sm_90/*.ptx); \
	} > ptx/MANIFEST
	@echo "  wrote kernels/ptx/MANIFEST"

gpu-bundle: ## pack stripped GPU test binaries (packages with a gpu_test.go) and bam into .gpubundle/ (+ build/gpu-bundle.tar.gz)
	@rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)/tests build
	@echo '*' > $(BUNDLE)/.gitignore
	@set -e; for p in $(GPU_PKGS); do \
	  name=$$(echo $${p#./} | tr / _); echo "  TEST $$p -> $(BUNDLE)/tests/$$name.test"; \
	  CGO_ENABLED=1 $(GO) test -c -trimpath -ldflags='-s -w' -o $(BUNDLE)/tests/$$name.test $$p 2>$(BUNDLE)/build.log \
	    || { cat $(BUNDLE)/build.log; exit 1; }; \
	done
	@echo "  BUILD ./cmd/bam -> $(BUNDLE)/bam"
	@CGO_ENABLED=1 $(GO) build -trimpath -ldflags='-s -w' -o $(BUNDLE)/bam ./cmd/bam 2>$(BUNDLE)/build.log || { cat $(BUNDLE)/build.log; exit 1; }
	@rm -f $(BUNDLE)/build.log
	@cp scripts/gpu-test.sh $(BUNDLE)/gpu-test.sh
	@{ git rev-parse HEAD 2>/dev/null || echo unknown; } | tr -d '\n' > $(BUNDLE)/COMMIT
	@if [ -n "$$(git status --porcelain 2>/dev/null)" ]; then echo -n -dirty >> $(BUNDLE)/COMMIT; fi
	@tar -C $(BUNDLE) -czf build/gpu-bundle.tar.gz --exclude=.gitignore .
	@echo "  $$(du -sh $(BUNDLE) | cut -f1) in $(BUNDLE)/, $$(du -h build/gpu-bundle.tar.gz | cut -f1) in build/gpu-bundle.tar.gz"
	@echo "  on the GPU host: make gpu-test BUNDLE=$(BUNDLE)   or   bash $(BUNDLE)/gpu-test.sh $(BUNDLE)"

gpu-test: ## on a GPU host: run the prebuilt bundle (tests, compute-sanitizer, bam info, bench pcie); needs no Go
	bash scripts/gpu-test.sh $(BUNDLE)
