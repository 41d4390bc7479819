# vgpu-host — make help lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)
BIN := bin/vgpu-host
HELPER := bin/vgpu-host-libvirt
NVML_HELPER := bin/vgpu-host-nvml
AGENT_BIN := bin/vgpu-host-agent
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# Both binaries carry the same stamp; `vgpu-host version` compares them.
LDFLAGS := -X github.com/vgpu-host/vgpu-host/internal/buildinfo.version=$(VERSION) \
	-X github.com/vgpu-host/vgpu-host/internal/buildinfo.commit=$(COMMIT)
# urfave_cli_no_template: help without text/template, which also lets the linker drop unused
# methods (a smaller binary that starts faster; the help text is the same).
BUILDFLAGS := -trimpath -tags urfave_cli_no_template -ldflags "$(LDFLAGS)"
# The CLI's runtime defaults (cmd/vgpu-host/godebug.default, the one place for them: the
# benches' bare Go floors and TestLightBinaryInits' release build read it too), linked in as
# the Go command links a main package's //go:debug lines, which accept only the settings the
# toolchain registers. disablethp=1: no transparent huge pages for the heap. On a host whose
# THP is "always" (Debian's kernel) each 2 MB region a short CLI run first touches was
# zeroed whole for the few KB it used; in the lab guest that was half of a bare Go
# binary's start (#32). GODEBUG in the environment still overrides it.
CLI_GODEBUG := $(shell cat cmd/vgpu-host/godebug.default)
CLI_BUILDFLAGS := -trimpath -tags urfave_cli_no_template -ldflags "$(LDFLAGS) -X runtime.godebugDefault=$(CLI_GODEBUG)"

# make install: PREFIX and DESTDIR as usual; the other directories follow PREFIX.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The Cockpit page: Cockpit looks for packages in $(PREFIX)/share/cockpit (XDG_DATA_DIRS).
COCKPITDIR ?= $(PREFIX)/share/cockpit
UNIT := deploy/systemd/vgpu-host-restore.service
# The agent's unit: the alternative to the restore unit (Conflicts=; docs/reconcile.md).
AGENT_UNIT := deploy/systemd/vgpu-host-agent.service

# Go first, before anything else: a missing or too old toolchain is said in one line. `make
# help`, `make deps`, `make uninstall` and `make clean` work without Go.
ifneq ($(filter-out help deps clean uninstall cockpit,$(or $(MAKECMDGOALS),help)),)
GO_PROBLEM := $(shell scripts/check-go.sh '$(GO)')
ifneq ($(GO_PROBLEM),)
$(error $(GO_PROBLEM))
endif
endif

.PHONY: help deps build build-static build-helper build-nvml build-kube demo test test-unit test-go test-install test-deb fuzz race e2e lab-snapshot bench lint \
	install uninstall deb clean cockpit test-web

help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
	@scripts/check-go.sh '$(GO)' | sed 's/^/\nnote: /' || true

deps: ## install every Debian package any target needs (root; only what is missing)
	@scripts/deps.sh all

build: build-static build-helper build-nvml build-kube ## build bin/vgpu-host (pure Go, static) and the agent bin/vgpu-host-agent, its libvirt helper bin/vgpu-host-libvirt (cgo), its NVML helper bin/vgpu-host-nvml (cgo) and its kubelet device plugin bin/vgpu-host-kube

build-static: ## build bin/vgpu-host alone, and the agent bin/vgpu-host-agent (cmd/vgpu-host-agent): static, need no Debian package
	CGO_ENABLED=0 $(GO) build $(CLI_BUILDFLAGS) -o $(BIN) ./cmd/vgpu-host
	@# The agent is the same command tree with its server, metrics, reconcile and drift watcher
	@# (internal/agentcmd, its own main): the Prometheus client's init stays out of every other
	@# command's start.
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o $(AGENT_BIN) ./cmd/vgpu-host-agent

build-helper: ## build the libvirt helper bin/vgpu-host-libvirt (needs libvirt-dev)
	@scripts/deps.sh helper
	$(GO) build $(BUILDFLAGS) -o $(HELPER) ./cmd/vgpu-host-libvirt

# go-nvml dlopens libnvidia-ml.so.1 when NVML is initialised: the helper builds and starts
# without the NVIDIA driver (it answers "NVML not available" then). Release build: no mock in it.
build-nvml: ## build the NVML (MIG) helper bin/vgpu-host-nvml (cgo; needs a C compiler, not the NVIDIA driver)
	@scripts/deps.sh helper
	$(GO) build $(BUILDFLAGS) -o $(NVML_HELPER) ./cmd/vgpu-host-nvml

build-kube: ## build the kubelet device plugin and DRA driver bin/vgpu-host-kube (pure Go, static)
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o bin/vgpu-host-kube ./cmd/vgpu-host-kube

# The Cockpit page needs Node.js and npm to build (npm ci from cockpit/package-lock.json, then
# esbuild): kept out of `make build`, so the binaries build with Go alone. make install, make deb
# and make test-web build it; a host without Node gets the built page from the .deb.
cockpit: ## build the Cockpit page "GPUs" into cockpit/dist (Node.js 18+ and npm; npm ci when the lockfile changed): docs/cockpit.md
	@scripts/cockpit-build.sh

demo: build-static ## no root, installs nothing: check this host, then inspect, render and bind --dry-run on the bundled real-kernel snapshot
	@scripts/demo.sh

# go vet sees only the files of the tags it is given: two passes vet every file a build or test
# compiles. Untagged: every file without a tag and every !TAG file (the release crash and
# kernel-emulator hooks); then every tag the builds and tests use at once, no two of which
# exclude each other: the NVML mock (nvmlmock), the crash hooks (crashtest), the browser
# test's kernel emulator in vgpu-host-agent (fakekernel). No tag chooses a binary: vgpu-host
# and vgpu-host-agent are two mains (cmd/). test/k8s/fakecri (-tags k8sfakecri), test/k8s's
# container runtime, is vetted on its own by scripts/vet-fakecri.sh, which also checks that
# go.mod's k8s.io/cri-* are the staging version of the Kubernetes test/k8s/build.sh builds.
VET_TAGS := "" nvmlmock,crashtest,fakekernel
# staticcheck, at a fixed version, run by `go run` from the module proxy's copy: it is a tool of
# the build, not of the product, so it stays out of go.mod (its golang.org/x/tools would move
# the versions the product's modules agree on). Beyond vet it finds code nothing calls and test
# values computed and never checked (the first run found eight dead helpers and two tests that
# checked an exit code but not the error they promised); `//lint:ignore CHECK reason` marks the
# few deliberate cases. The first run on a fresh machine downloads and builds it (about a
# minute); each run after is about 30 s a tag set on 2 cores.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: ## gofmt, go vet and staticcheck (every build tag the builds and tests use)
	@scripts/deps.sh helper
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@for tags in $(VET_TAGS); do echo "go vet -tags '$$tags' ./..."; $(GO) vet -tags "$$tags" ./... || exit 1; done
	@for tags in $(VET_TAGS); do echo "staticcheck -tags '$$tags' ./..."; $(GO) run $(STATICCHECK) -tags "$$tags" ./... || exit 1; done
	@scripts/vet-fakecri.sh

# scripts/test-tmpdir.sh: the tests' temporary files (fake host trees, test binaries) on
# /dev/shm when it is a tmpfs fit for it: half the wall time of test-unit here (see the script).
test-unit: ## fast unit tests (fake sysfs trees, libvirt test:///default); real-libvirtd tests skip
	@scripts/deps.sh helper
	scripts/test-tmpdir.sh $(GO) test -count=1 ./...

# -timeout: go test's default of 10 minutes a package is less than internal/clitree's libvirtd tests
# take under TCG with the image bake (TestBakeLibvirtd; the first run also builds its image).
test-go: ## every Go test, including those against a real libvirtd the tests start (root)
	@scripts/deps.sh test
	VGPU_TEST_LIBVIRTD=1 scripts/test-tmpdir.sh $(GO) test -count=1 -timeout 60m ./...

# Every fuzz target, FUZZTIME each (8 s x 12 targets = 96 s of fuzzing, plus about a minute
# of instrumented builds on 2 cores). scripts/fuzz.sh passes -fuzzminimizetime 1s: Go minimizes
# every new interesting input for up to 60 s by default, uncounted, which left FuzzRender at a
# few dozen execs in 8 s. Inputs that fail are written to the package's testdata/fuzz/TARGET/
# and fail `go test` from then on: commit them with the fix.
FUZZTIME ?= 8s
FUZZ_TARGETS := \
	./host:FuzzParseAddress ./host:FuzzParseCreatableVGPUTypes ./host:FuzzMdevSupportedTypes \
	./mdev:FuzzUUID ./mdev:FuzzMdevctlDefinition ./mdev:FuzzStateFiles \
	./vfio:FuzzLedgerFile ./ledger:FuzzLedger ./domains:FuzzRender ./cloudinit:FuzzSeedISO \
	./internal/clitree:FuzzAgentRequest ./mig:FuzzProfileName

fuzz: ## run every fuzz target for FUZZTIME (default 8s) each
	@scripts/deps.sh test
	@GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# The packages whose code runs concurrently (file locks, the racing CLI tests, the scan's split
# pass and the batched sysfs writes), under the race detector.
race: ## go test -race on the packages with concurrency
	@scripts/deps.sh test
	$(GO) test -race -count=1 ./internal/filelock ./internal/future ./ledger ./mdev ./mig/remote ./vfio
	$(GO) test -race -count=1 -run 'ForEachSplit|WriteEach|SysfsWriter|Scan|ConcurrentLookups|NVIDIAGate' ./host
	$(GO) test -race -count=1 -run 'TestRace(VF|Mdev)' ./internal/clitree
	# The long-running parts: the agent (its server, drift watch, metrics, boot reconcile), the
	# device plugin and DRA driver, and the lifecycle they call. Their real-libvirtd tests ran
	# in test-go; here they skip, saying so. About a minute here with a warm build cache.
	VGPU_TEST_LIBVIRTD=ran-in-the-untagged-pass $(GO) test -race -count=1 ./agent/... ./kube/... ./lifecycle ./ops

e2e: build ## real-kernel lab: boot Debian's kernel under QEMU with an IOMMU and run the scenarios
	@scripts/deps.sh e2e
	@test/e2e/run.sh

lab-snapshot: build ## capture the lab guest's sysfs into host/testdata
	@scripts/deps.sh e2e
	@test/e2e/run.sh --snapshot

test-install: build ## make install into a temporary DESTDIR: exactly the expected files, man pages without warnings; then uninstall
	@scripts/deps.sh test
	@scripts/test-install.sh

test-deb: deb ## the Debian package: dpkg -i, vgpu-host version and check, dpkg --purge, nothing left (root)
	@scripts/deps.sh test
	@scripts/test-deb.sh $(DEB)

# A real login to Debian's cockpit-ws (a throwaway user that exists only in the test's mount namespace), the page in headless
# chromium driven by puppeteer-core, a real agent on the lab snapshot (cockpit/test/run.sh).
test-web: cockpit ## the Cockpit page in a real browser: cockpit-ws, chromium, the agent on the lab snapshot (root)
	@scripts/deps.sh helper web
	@cockpit/test/run.sh

# make test's stages, in order; scripts/test-stages.sh runs each as its own make call and ends
# with the seconds each took (CI's log: what every suite costs on the machine that ran it).
TEST_STAGES := lint test-go fuzz race test-install test-deb test-web e2e
test: ## everything CI runs: lint, all Go tests (with a real libvirtd), fuzzing, race detector, install and the package, the Cockpit page in a browser, real-kernel lab
	+@MAKE='$(MAKE)' scripts/test-stages.sh $(TEST_STAGES)

.PHONY: test-k8s
test-k8s: build-kube ## the device plugin and DRA driver on upstream Kubernetes built from source, on three fake hosts (root; cold build far over CI's margin, so not in test: docs/k8s-upstream.md)
	@scripts/deps.sh k8s
	test/k8s/build.sh
	test/k8s/run.sh

bench: build ## benchmarks as ratios against peers measured in the same run
	@scripts/deps.sh bench e2e
	@bench/run.sh

# The files make install puts under $(DESTDIR)$(PREFIX); scripts/test-install.sh checks the list.
install: build cockpit ## install both binaries, the systemd units (restore and agent), bash/zsh/fish completions, man pages and the Cockpit page (PREFIX=/usr/local, DESTDIR)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) \
		$(DESTDIR)$(COCKPITDIR)/vgpu-host/assets
	install -m 0644 cockpit/dist/index.html cockpit/dist/index.js cockpit/dist/index.css \
		cockpit/dist/manifest.json cockpit/dist/index.js.LEGAL.txt $(DESTDIR)$(COCKPITDIR)/vgpu-host/
	install -m 0644 cockpit/dist/assets/* $(DESTDIR)$(COCKPITDIR)/vgpu-host/assets/
	install -m 0755 $(BIN) $(HELPER) $(NVML_HELPER) $(AGENT_BIN) $(DESTDIR)$(BINDIR)/
	sed 's#^ExecStart=/usr/bin/vgpu-host #ExecStart=$(BINDIR)/vgpu-host #' $(UNIT) >$(DESTDIR)$(UNITDIR)/vgpu-host-restore.service
	sed 's#^ExecStart=/usr/bin/vgpu-host #ExecStart=$(BINDIR)/vgpu-host #' $(AGENT_UNIT) >$(DESTDIR)$(UNITDIR)/vgpu-host-agent.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vgpu-host-restore.service $(DESTDIR)$(UNITDIR)/vgpu-host-agent.service
	$(BIN) completion bash >$(DESTDIR)$(BASHCOMPDIR)/vgpu-host
	$(BIN) completion zsh >$(DESTDIR)$(ZSHCOMPDIR)/_vgpu-host
	$(BIN) completion fish >$(DESTDIR)$(FISHCOMPDIR)/vgpu-host.fish
	chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/vgpu-host $(DESTDIR)$(ZSHCOMPDIR)/_vgpu-host $(DESTDIR)$(FISHCOMPDIR)/vgpu-host.fish
	rm -rf .cache/man && $(BIN) __man .cache/man
	install -m 0644 .cache/man/*.1 $(DESTDIR)$(MANDIR)/man1/

uninstall: ## remove what make install installed (same PREFIX and DESTDIR)
	rm -f $(DESTDIR)$(BINDIR)/vgpu-host $(DESTDIR)$(BINDIR)/vgpu-host-libvirt \
		$(DESTDIR)$(UNITDIR)/vgpu-host-restore.service $(DESTDIR)$(UNITDIR)/vgpu-host-agent.service \
		$(DESTDIR)$(BASHCOMPDIR)/vgpu-host $(DESTDIR)$(ZSHCOMPDIR)/_vgpu-host $(DESTDIR)$(FISHCOMPDIR)/vgpu-host.fish \
		$(DESTDIR)$(MANDIR)/man1/vgpu-host.1 $(DESTDIR)$(MANDIR)/man1/vgpu-host-*.1
	rm -f $(DESTDIR)$(BINDIR)/vgpu-host-nvml $(DESTDIR)$(BINDIR)/vgpu-host-agent
	rm -rf $(DESTDIR)$(COCKPITDIR)/vgpu-host

# make deb: the Debian package, built by nFPM (a Go tool dependency pinned in go.mod) from a
# make install into a staging tree with Debian's paths. Its version must start with a digit.
DEB_VERSION ?= 0.0.0+git$(shell git rev-list --count HEAD 2>/dev/null || echo 0).$(COMMIT)
DEB := bin/vgpu-host_$(DEB_VERSION)_amd64.deb
deb: ## build the Debian package bin/vgpu-host_VERSION_amd64.deb (nFPM, deploy/nfpm.yaml)
	rm -rf .cache/deb-root
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/.cache/deb-root PREFIX=/usr UNITDIR=/usr/lib/systemd/system \
		ZSHCOMPDIR=/usr/share/zsh/vendor-completions FISHCOMPDIR=/usr/share/fish/vendor_completions.d
	gzip -9n .cache/deb-root/usr/share/man/man1/*.1
	rm -f bin/vgpu-host_*.deb
	DEB_VERSION=$(DEB_VERSION) $(GO) tool nfpm package --config deploy/nfpm.yaml --packager deb --target $(DEB)
	@echo "built $(DEB)"

clean: ## remove build outputs and the lab cache (cockpit/node_modules, npm's, stays)
	rm -rf bin .cache cockpit/dist
