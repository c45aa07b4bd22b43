# ue: the UE-side package (issue 15): SIGMA, a BPF struct_ops congestion control for
# the UE's uplink sockets (ue/bpf/), its Python loader and grant-map reader (mts_ue),
# loaded by the suite's struct_ops loader (pep/bpf/loader.c, build/bin/meld-loader).
# The kernel's types (vmlinux.h) and the loader come from mk/pep-meld.mk.
APT_PACKAGES += clang libbpf-dev bpftool iperf3
BUILD_TARGETS += build/bpf/sigma.bpf.o
TEST_TARGETS += test-ue

SIGMA_OBJ := build/bpf/sigma.bpf.o

$(SIGMA_OBJ): ue/bpf/sigma.bpf.c ue/bpf/sigma.h $(CCA_H) $(MELD_VMLINUX)
	clang -target bpf -g -O2 -Wall -Werror -D__TARGET_ARCH_$(MELD_ARCH) \
		-I$(dir $(MELD_VMLINUX)) -Iue/bpf $(CCA_INCLUDE) -c $< -o $@.tmp
	@mv $@.tmp $@

.PHONY: test-ue
test-ue: python $(SIGMA_OBJ) $(MELD_LOADER) build/bin/ran-emulator ## SIGMA on real TCP in namespaces, its grant feed (root: BPF)
	uv run pytest -q ue/tests

.PHONY: experiment-sigma
EXPERIMENT_TARGETS += experiment-sigma
experiment-sigma: python $(SIGMA_OBJ) $(MELD_LOADER) build/bin/ran-emulator ## SIGMA vs Reno/CUBIC/BBR on the emulated uplink, 5 runs (root; ~20 min) -> docs/results/sigma/
	uv run python -m mts_lab.sigma.experiment --out docs/results/sigma
