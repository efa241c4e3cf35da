# LITE-RS: top-level build. `make demo` runs the showcase on a virtual cluster,
# `make test` runs every test; both install what they need first.
#
#   KERNEL=release|debug  guest kernel variant (demo/cluster: release; test: debug);
#                         KERNEL=debian: Debian's stock kernel (tools/kernel/debian.sh)
#   NODES=N               virtual cluster size (default 3)
#   PROVIDER=rxe|siw      cluster, bench: the guests' soft RDMA device (siw: our kernels only)
#   BOTTLENECK=NODE:RATE[:QUEUE]  cluster: NODE's port behind a RATE bytes/s queue (e.g. 1:4M)
#   SEGMENT=bridge                cluster: tap ports on a Linux bridge, tc links, jumbo frames
#   SMP=N                 cluster: vCPUs per guest (default 2; 1 keeps a bottleneck's wire the
#                         bottleneck, see docs/measurements/priority-classes.md "Two regimes")
#   KDIR=/path            build the module against this kernel tree instead (real nodes),
#                         with BINDGEN=bindgen and KMAKE='LLVM=1' as that kernel needs

KERNEL ?= release
NODES ?= 3
PROVIDER ?= rxe
TEST_KERNEL ?= debug

SHELL := /bin/bash
# rustup's cargo may be missing from a non-login PATH (CI).
export PATH := $(PATH):$(HOME)/.cargo/bin
LITE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lite-rs
export LITE_CACHE
BINDGEN ?= $(LITE_CACHE)/bin/bindgen
KMAKE ?= LLVM=1 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc BINDGEN=$(BINDGEN)
KDIR ?=
GUEST := build/$(KERNEL)/guest
CARGO ?= cargo
# Times a phase of make test (build/test-phases).
PHASE := tools/phase.sh

.PHONY: all deps kernel module userspace guest headers cluster cluster-down shell demo bench bench-access bench-qos test test-host test-vm test-scale test-link test-siw lint lint-module fuzz soak clean

all: guest

deps:
	@tools/deps.sh

kernel: deps
	@tools/kernel/build.sh $(KERNEL) >/dev/null

$(LITE_CACHE)/bin/bindgen:
	tools/deps.sh

# bindgen turns the C helper header into the Rust declarations the module uses.
lite/helpers_ffi.rs: lite/helpers.h $(BINDGEN)
	$(BINDGEN) $< -o $@ --use-core --ctypes-prefix core::ffi --no-layout-tests \
	  --allowlist-function 'lite_.*' --allowlist-var 'LITE_.*'

# KERNEL=debian builds in the sid root, with the stock kernel's own rustc and gcc,
# against the tree debian.sh prepares from Debian's source package.
STOCK := $(if $(KDIR),,$(filter debian,$(KERNEL)))

# The kernel API's sample module (apps/kmod-echo) is built beside lite.ko, against
# its Module.symvers, as another module author's would be.
SAMPLE := M=$(CURDIR)/apps/kmod-echo KBUILD_EXTRA_SYMBOLS=$(CURDIR)/Module.symvers modules

module: lite/helpers_ffi.rs $(if $(KDIR)$(STOCK),,kernel)
ifeq ($(STOCK),debian)
	@tools/kernel/debian.sh prepare >/dev/null
	@tools/kernel/debian.sh make -s M=$(CURDIR) modules && \
	  tools/kernel/debian.sh make -s $(SAMPLE) && \
	  mkdir -p $(GUEST) && cp lite.ko apps/kmod-echo/lite_echo.ko $(GUEST)/
else
	@kdir="$(KDIR)"; [ -n "$$kdir" ] || kdir=$$(tools/kernel/build.sh $(KERNEL))/build; \
	  $(MAKE) -s -C $$kdir M=$(CURDIR) $(KMAKE) $(if $(filter debug,$(KERNEL)),LITE_TEST_HOOKS=y) modules && \
	  $(MAKE) -s -C $$kdir $(KMAKE) $(SAMPLE) && \
	  mkdir -p $(GUEST) && cp lite.ko apps/kmod-echo/lite_echo.ko $(GUEST)/
endif

# The guests' programs (the simulator, crates/lite-sim, is for make sim and the host tests).
userspace: deps
	$(CARGO) build --release --workspace --exclude lite-sim --quiet
	mkdir -p build/bin
	cc -O2 -Wall -Wextra -Werror -Iliblite/include apps/c-hello/hello.c target/release/liblite.a \
	  -lpthread -ldl -lm -o build/bin/lite-hello
	cc -O2 -Wall -Wextra -Werror tools/regmr/regmr.c -libverbs -o build/bin/lite-regmr
	cc -O2 -Wall -Wextra -Werror tools/readphases/read_phases.c -libverbs -o build/bin/lite-read-phases

# Everything the guests see at /lite.
guest: module userspace
	mkdir -p $(GUEST)/bin
	cp target/release/lite-admin target/release/lite-selftest target/release/lite-bench build/bin/lite-hello \
	  target/release/lite-log target/release/lite-kv target/release/lite-mr \
	  target/release/lite-graph \
	  build/bin/lite-regmr build/bin/lite-read-phases $(GUEST)/bin/

headers:
	LITE_BLESS=1 $(CARGO) test --quiet -p liblite --test c_headers

cluster: guest
	tools/vcluster.py up --nodes $(NODES) --kernel $(KERNEL) --provider $(PROVIDER) --join $(if $(BOTTLENECK),--bottleneck $(BOTTLENECK)) $(if $(SEGMENT),--segment $(SEGMENT)) $(if $(SMP),--smp $(SMP))

cluster-down:
	tools/vcluster.py down

shell:
	tools/vcluster.py shell $(or $(N),0)

demo: guest
	tools/demo.py --nodes $(NODES) --kernel $(KERNEL)

# LITE vs perftest/libibverbs on one 3-node cluster: ratio table, build/bench/results.json, latency.svg.
bench: guest
	tools/bench.py --kernel $(KERNEL) --provider $(PROVIDER) $(if $(SMP),--smp $(SMP))
	[ "$(PROVIDER)" != rxe ] || tools/qos_bench.py --kernel $(KERNEL) --regime link --runs 3
	[ "$(PROVIDER)" != rxe ] || tools/qos_bench.py --kernel $(KERNEL) --regime cpu

# Priority classes where a link is the bottleneck (3 runs, modes alternating), then
# where the emulating CPU is.
# What per-range keys cost against LITE's global rkey (docs/security.md): both modes on
# one cluster, alternating rounds (ARGS=--quick: one round, about 10 min).
bench-access: guest
	tools/access_bench.py --kernel $(KERNEL) $(ARGS)

bench-qos: guest
	tools/qos_bench.py --kernel $(KERNEL) --regime link --runs 3
	tools/qos_bench.py --kernel $(KERNEL) --regime cpu

# What the module's own pure code costs per operation on this host (criterion, no VMs),
# and the share of a core the pacer needs at 25 and 100 Gbit/s (docs/measurements/host-cost.md).
.PHONY: bench-host
bench-host:
	tools/host_bench.py $(ARGS)

# SW-Pri at 25 and 100 Gbit/s in simulation, driving the module's own pacer code, and
# the model calibrated on the virtual cluster (docs/measurements/simulation.md); about
# 30 s on 2 cores, no VMs. ARGS='--json' for JSON, ARGS='mixed --help' for more.
.PHONY: sim
sim:
	$(CARGO) run --release --quiet -p lite-sim -- $(or $(ARGS),standard)

# The one lint gate: every crate rustfmt-clean and clippy-clean (the module's pure
# files through the host crate), liblite's documentation without a warning (its
# examples run as doctests in make test-host), the Python tools ruff-clean (ruff.toml).
lint: deps
	$(CARGO) fmt --all --check
	rustfmt --check --edition 2021 --config-path lite/.rustfmt.toml lite/lite_main.rs lite/host/lib.rs
	$(CARGO) clippy --workspace --all-targets --quiet -- -D warnings
	RUSTDOCFLAGS='-D warnings' $(CARGO) doc --quiet --no-deps -p liblite
	python3 -m ruff check --quiet tools

# The module through the kernel's own clippy (CLIPPY=1, Debian's clippy-driver for its
# rustc), with the debug build's test hooks; any warning fails. It needs a built kernel
# tree, so make test runs it once the debug kernel is there.
lint-module: lite/helpers_ffi.rs
	@kdir=$$(tools/kernel/build.sh debug)/build && touch lite/lite_main.rs && \
	  out=$$($(MAKE) -s -C $$kdir M=$(CURDIR) $(KMAKE) CLIPPY=1 CLIPPY_DRIVER=/usr/bin/clippy-driver \
	    LITE_TEST_HOOKS=y modules 2>&1); rc=$$?; \
	  if [ $$rc != 0 ] || echo "$$out" | grep -qE '^(warning|error)'; then echo "$$out"; exit 1; fi

test-host: lint
	$(CARGO) test --workspace --quiet 2>&1 | tee build/test-host.log | grep -E '^test result|FAILED|panicked' ; \
	  test $${PIPESTATUS[0]} -eq 0
	python3 -m pytest -q tools/tests
	python3 tools/bench_docs.py --check docs/measurements/*.json
	$(MAKE) --no-print-directory test-packages

# Every functional test on the debug kernel (KASAN, lockdep, kmemleak); then, on
# Debian's stock 7.2 kernel, unmodified (tools/kernel/debian.sh), which moves RDMA data
# ~50x faster than the debug kernel: SW-Pri behind a link on the bridge segment, then
# on one cluster (the stock suite) the functional tests again with the data-heavy ones
# (1 GiB) and a fourth node that runs Debian with systemd and LITE-RS from the
# packages (make deb). The release kernel is for demo, cluster and bench: make test
# builds one kernel. While the debug kernel builds, the Debian packages and the sid
# root are fetched beside it (network and disk, not a second kernel build);
# `debian.sh prepare` waits for them on its lock.
test-vm:
	@mkdir -p build && (tools/kernel/debian.sh fetch > build/debian-fetch.log 2>&1 &)
	$(PHASE) guest-$(TEST_KERNEL) $(MAKE) --no-print-directory guest KERNEL=$(TEST_KERNEL)
	$(PHASE) lint-module $(MAKE) --no-print-directory lint-module
	$(PHASE) suite-full-$(TEST_KERNEL) tools/vmtest.py --kernel $(TEST_KERNEL) --suite full
	$(PHASE) guest-debian $(MAKE) --no-print-directory guest KERNEL=debian
	$(PHASE) suite-bridge tools/vmtest.py --kernel debian --suite bridge --run-dir build/vmtest-bridge
	@ls build/deb/lite-rs-tools_*.deb >/dev/null 2>&1 || $(MAKE) --no-print-directory deb
	$(PHASE) suite-stock tools/vmtest.py --kernel debian --suite stock --run-dir build/vmtest-debian

# Link faults behind wires on Debian's stock kernel: loss, bursts, duplicates, bit
# errors, partitions shorter and longer than the retry budget, a cut RDMA path,
# deadlines, a dead peer's paced bytes. About 8 min on a slow host: not in make test,
# whose 60-minute cold budget it does not fit (docs/measurements/times.md).
test-link:
	@mkdir -p build
	$(MAKE) --no-print-directory guest KERNEL=debian
	tools/vmtest.py --kernel debian --suite link --run-dir build/vmtest-link

# The link suite on Soft-iWARP (siw), whose QPs connect through the RDMA CM: on the
# release kernel (Debian's stock kernel has no siw). make test runs siw's functional
# tests and a node leaving and rejoining at the end of the debug suite
# (vmtests/siw.py). With the test kernels' siw fixes all 9 tests passed in 421 s
# (2026-12-04; docs/reliability.md, "On iWARP").
test-siw:
	@mkdir -p build
	$(MAKE) --no-print-directory guest KERNEL=release
	tools/vmtest.py --kernel release --suite link --provider siw --run-dir build/vmtest-siw-link

# Eight nodes on one cluster (release kernel; tools/litebench/vmtests/scale.py): all join
# with K x 7 QPs and every pair pings, an LMR striped over all eight, a multicast RPC to
# seven, a barrier of eight processes, a killed node rejoining. Not in make test.
test-scale:
	@mkdir -p build
	$(MAKE) --no-print-directory guest KERNEL=release
	tools/vmtest.py --kernel release --suite scale --run-dir build/vmtest-scale

# CALLS unprivileged random ioctls on the debug kernel (KASAN, lockdep, kmemleak) from
# PROCESSES processes on each of 2 nodes, with the membership checked between batches
# (make test runs a 10 000-call slice from 4 a node). About 370 calls/s on the
# emulated cluster with 6 a node, 210 with 2.
CALLS ?= 1000000
PROCESSES ?= 6
fuzz:
	@mkdir -p build
	$(MAKE) --no-print-directory guest KERNEL=debug
	tools/vmtest.py --kernel debug --suite fuzz --calls $(CALLS) --processes $(PROCESSES) --run-dir build/vmtest-fuzz

# MINUTES of applications, benchmarks and checked traffic with churn and faults on the
# debug kernel (tools/soak.py; not in make test, whose time budget it does not fit); a report
# at the end.
MINUTES ?= 30
soak:
	@mkdir -p build
	$(MAKE) --no-print-directory guest KERNEL=debug
	tools/soak.py --kernel debug --minutes $(MINUTES) --run-dir build/soak

# Each phase's time (tools/phase.sh) is printed at the end, failed or not.
test:
	@mkdir -p build && : > build/test-phases
	@$(PHASE) host $(MAKE) --no-print-directory test-host && \
	  $(MAKE) --no-print-directory test-vm; rc=$$?; \
	  echo "make test phases:"; $(PHASE) --report; exit $$rc

# Module build products are removed by name: asking kbuild would need (and build) a kernel.
clean:
	-tools/vcluster.py down 2>/dev/null
	rm -rf build target lite/helpers_ffi.rs lite.ko lite.mod lite.mod.c lite.mod.o lite.o \
	  Module.symvers modules.order .module-common.o lite/*.o
	rm -f .*.cmd lite/.*.cmd
	cd apps/kmod-echo && rm -f lite_echo.ko lite_echo.mod lite_echo.mod.c *.o Module.symvers \
	  modules.order .*.cmd

# Debian's stock kernel (sid, 7.x, Rust on), as shipped: resolve the current packages,
# a sid root with the exact rustc and gcc it was built with, the Rust metadata its
# headers lack (from its own source package) and the guest kernel for the virtual
# cluster (vcluster.py --kernel debian). Idempotent; all of it in $LITE_CACHE/debian.
.PHONY: debian-kernel
debian-kernel:
	@tools/kernel/debian.sh prepare >/dev/null
	@tools/kernel/debian.sh guest >/dev/null

# Installing on nodes (docs/install.md). `make deb`: the Debian packages lite-rs-dkms,
# lite-rs-tools, liblite0 and liblite-dev in build/deb/ (lintian must report no error);
# `make test-packages` also checks what their users rely on (soname, pkg-config, a C
# program on the shared library, the DKMS source, the system files). On a node, end to
# end (dkms, systemd, the lite group, an upgrade, a purge): make test's Debian suite
# (tools/litebench/vmtests/packages.py).
# Without packages: `make install [PREFIX=/usr/local] [DESTDIR=]` (user space, liblite,
# the system files) and `make install-dkms` (the module's source for dkms, which builds
# and installs it when DESTDIR is empty).
PREFIX ?= /usr/local
.PHONY: deb test-packages install install-dkms
deb: deps lite/helpers_ffi.rs
	@tools/deb.sh build

test-packages: deb
	@tools/deb.sh check

install:
	tools/install.sh build
	tools/install.sh install --prefix $(PREFIX) $(if $(DESTDIR),--destdir $(DESTDIR))

install-dkms: lite/helpers_ffi.rs
	tools/install.sh dkms $(if $(DESTDIR),--destdir $(DESTDIR))
