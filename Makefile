# vgpu-host — make help lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)
BIN := bin/vgpu-host
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: help deps build demo test test-unit test-go fuzz race e2e lab-snapshot bench lint clean

help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

deps: ## install the Debian packages the build, tests and lab need (root; only what is missing)
	@scripts/deps.sh

build: deps ## build bin/vgpu-host (pure Go, static), its libvirt helper bin/vgpu-host-libvirt (cgo) and its kubelet device plugin bin/vgpu-host-kube
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/vgpu-host
	$(GO) build -o bin/vgpu-host-libvirt ./cmd/vgpu-host-libvirt
	CGO_ENABLED=0 $(GO) build -o bin/vgpu-host-kube ./cmd/vgpu-host-kube

demo: build ## run the main job on this host: check, inspect, render an example VM (read-only)
	@scripts/demo.sh

lint: deps ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

test-unit: deps ## fast unit tests (fake sysfs trees, libvirt test:///default); real-libvirtd tests skip
	$(GO) test -count=1 ./...

test-go: deps ## every Go test, including those against a real libvirtd the tests start (root)
	VGPU_TEST_LIBVIRTD=1 $(GO) test -count=1 ./...

# Every fuzz target, FUZZTIME each (8 s x 11 targets = 88 s of fuzzing, plus about a minute
# of instrumented builds on 2 cores). scripts/fuzz.sh passes -fuzzminimizetime 1s: Go minimizes
# every new interesting input for up to 60 s by default, uncounted, which left FuzzRender at a
# few dozen execs in 8 s. Inputs that fail are written to the package's testdata/fuzz/TARGET/
# and fail `go test` from then on: commit them with the fix.
FUZZTIME ?= 8s
FUZZ_TARGETS := \
	./host:FuzzParseAddress ./host:FuzzParseCreatableVGPUTypes ./host:FuzzMdevSupportedTypes \
	./mdev:FuzzUUID ./mdev:FuzzMdevctlDefinition ./mdev:FuzzStateFiles \
	./vfio:FuzzLedgerFile ./ledger:FuzzLedger ./domains:FuzzRender ./cloudinit:FuzzSeedISO

fuzz: deps ## run every fuzz target for FUZZTIME (default 8s) each
	@GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# The packages whose code runs concurrently (file locks, the racing CLI tests), under the race
# detector.
race: deps ## go test -race on the packages with concurrency
	$(GO) test -race -count=1 ./internal/filelock ./ledger ./mdev ./vfio
	$(GO) test -race -count=1 -run 'TestRace(VF|Mdev)' ./cmd/vgpu-host

e2e: build ## real-kernel lab: boot Debian's kernel under QEMU with an IOMMU and run the scenarios
	@test/e2e/run.sh

lab-snapshot: build ## capture the lab guest's sysfs into host/testdata
	@test/e2e/run.sh --snapshot

test: lint test-go fuzz race e2e ## everything CI runs: lint, all Go tests (with a real libvirtd), fuzzing, race detector, real-kernel lab

bench: build ## benchmarks as ratios against peers measured in the same run
	@bench/run.sh

clean: ## remove build outputs and the lab cache
	rm -rf bin .cache
