# pep, MELD/RAPID (issue 5): the BPF congestion control (pep/bpf/) and its loader.
# Kept in its own fragment so that the PEP relay's mk/pep.mk and this file can change
# independently. Its tests live in pep/tests/ran_aware and run inside `make test-pep`
# (the prerequisites below build the kernel program first); `make test-meld` runs them alone.
APT_PACKAGES += clang libbpf-dev libelf-dev zlib1g-dev bpftool gcc libc6-dev pkg-config nftables iproute2
BUILD_TARGETS += build/bpf/meld.bpf.o build/bin/meld-loader
BENCH_TARGETS += bench-meld
EXPERIMENT_TARGETS += experiment-meld experiment-rapid

MELD_KERNEL := $(shell uname -r)
MELD_VMLINUX := build/bpf/$(MELD_KERNEL)/vmlinux.h
MELD_OBJ := build/bpf/meld.bpf.o
MELD_LOADER := build/bin/meld-loader
MELD_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')

# The running kernel's types, for CO-RE (one header per kernel release).
$(MELD_VMLINUX):
	@mkdir -p $(@D)
	@test -r /sys/kernel/btf/vmlinux || { echo "no /sys/kernel/btf/vmlinux: the kernel lacks BTF"; exit 1; }
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(MELD_OBJ): pep/bpf/meld.bpf.c pep/bpf/meld.h $(CCA_H) $(MELD_VMLINUX)
	clang -target bpf -g -O2 -Wall -Werror -D__TARGET_ARCH_$(MELD_ARCH) \
		-I$(dir $(MELD_VMLINUX)) -Ipep/bpf $(CCA_INCLUDE) -c $< -o $@.tmp
	@mv $@.tmp $@

$(MELD_LOADER): pep/bpf/loader.c
	@mkdir -p $(@D)
	gcc -O2 -g -Wall -Wextra -Werror -o $@ $< -lbpf -lelf -lz

.PHONY: test-meld bench-meld experiment-meld experiment-rapid
# The small experiments in the tests need the emulator and the RNIS adapter too.
MELD_TEST_DEPS := $(MELD_OBJ) $(MELD_LOADER) build/bin/ran-emulator build/bin/rnis-adapter
test-pep: $(MELD_TEST_DEPS)

test-meld: python rabbitmq $(MELD_TEST_DEPS) ## MELD/RAPID tests alone (root: BPF, namespaces)
	uv run pytest -q pep/tests/ran_aware

bench-meld: python $(MELD_OBJ) $(MELD_LOADER) ## cost of a per-UE map update from Python -> docs/results/meld-bench/
	uv run python -m mts_lab.meld.bench --out docs/results/meld-bench

experiment-meld: python rabbitmq build ## MELD, thesis Table 4.1 setup and the discrimination experiment (long) -> docs/results/meld/
	uv run python -m mts_lab.meld.experiment --out docs/results/meld
	uv run python -m mts_lab.meld.discrimination_experiment --out docs/results/meld

experiment-rapid: python rabbitmq build ## RAPID, thesis Table 5.3 scenarios (long) -> docs/results/rapid/
	uv run python -m mts_lab.rapid.experiment --out docs/results/rapid

EXPERIMENT_TARGETS += experiment-meld-discrimination
.PHONY: experiment-meld-discrimination
experiment-meld-discrimination: python rabbitmq build ## MELD decisions vs the emulator's drop labels (long) -> docs/results/meld/discrimination.*
	uv run python -m mts_lab.meld.discrimination_experiment --out docs/results/meld

EXPERIMENT_TARGETS += experiment-meld-cubic-gain
.PHONY: experiment-meld-cubic-gain
experiment-meld-cubic-gain: python rabbitmq build ## why MELD-overflow gains no goodput over CUBIC: the cell with and without residual radio loss, 10 runs -> docs/results/meld-cubic/gain.*
	uv run python -m mts_lab.meld.discrimination_experiment --out docs/results/meld-cubic/with-loss --modes off,meld-overflow
	uv run python -m mts_lab.meld.discrimination_experiment --out docs/results/meld-cubic/without-loss --modes off --scenario testbed/configs/lte-25prb-meld-discrimination-no-radio-loss.yaml
	uv run python -m mts_lab.meld.cubic_gain --with-loss docs/results/meld-cubic/with-loss --without-loss docs/results/meld-cubic/without-loss --out docs/results/meld-cubic

# Against a RAN you run (docs/oai-testbed.md): nothing here builds or starts the RAN, so it
# is in no target list. The UE's and the server's namespaces and addresses are yours.
LIVE_UE_NS ?= oai-ue
LIVE_UE_IP ?= 10.0.1.2
LIVE_SERVER_IP ?= 10.79.0.2
LIVE_PEP_URL ?= http://127.0.0.1:8102
LIVE_RNIS_METRICS ?= http://127.0.0.1:8101/metrics
.PHONY: experiment-meld-live
experiment-meld-live: python ## goodput direct / PEP / PEP+MELD-DE at 0, 0.5, 1 % loss on a live RAN and the compose stack of .env -> docs/results/meld-live/
	uv run python -m mts_lab.meld.live --ue-ns $(LIVE_UE_NS) --ue-ip $(LIVE_UE_IP) \
		--server-ip $(LIVE_SERVER_IP) --pep-url $(LIVE_PEP_URL) \
		--rnis-metrics $(LIVE_RNIS_METRICS) --env-file .env --out docs/results/meld-live
