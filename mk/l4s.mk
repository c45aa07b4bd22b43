# l4s (issue 14): spin and delay bits over TCP with BPF (l4s/bpf/), the Python package
# mec_l4s that loads and reads them (l4s/src/), their tests (l4s/tests/).
APT_PACKAGES += clang libbpf-dev bpftool iproute2 nftables ethtool tcpdump
BUILD_TARGETS += build/bpf/efm_marker.bpf.o build/bpf/efm_observer.bpf.o build/bpf/prague.bpf.o
TEST_TARGETS += test-l4s

L4S_VMLINUX := build/bpf/$(shell uname -r)/vmlinux.h
L4S_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
# -mcpu=v3: the atomic compare-and-swap that hands a delay sample from ingress to egress
L4S_BPF_CFLAGS := -target bpf -mcpu=v3 -g -O2 -Wall -Werror -D__TARGET_ARCH_$(L4S_ARCH) \
	-I$(dir $(L4S_VMLINUX)) -Il4s/bpf $(CCA_INCLUDE)

L4S_BPF := build/bpf/efm_marker.bpf.o build/bpf/efm_observer.bpf.o build/bpf/prague.bpf.o

$(L4S_BPF): build/bpf/%.bpf.o: l4s/bpf/%.bpf.c l4s/bpf/efm.h l4s/bpf/efm_packet.h $(CCA_H) $(L4S_VMLINUX)
	clang $(L4S_BPF_CFLAGS) -c $< -o $@.tmp
	@mv $@.tmp $@

# the lab's truth for the observer: each sender's own RTT samples (mts_lab.l4s.truth)
L4S_LAB_BPF := build/bpf/sender_rtt.bpf.o
BUILD_TARGETS += $(L4S_LAB_BPF)
$(L4S_LAB_BPF): build/bpf/%.bpf.o: testbed/lab/bpf/%.bpf.c $(L4S_VMLINUX)
	clang $(L4S_BPF_CFLAGS) -c $< -o $@.tmp
	@mv $@.tmp $@

.PHONY: test-l4s
test-l4s: python $(L4S_BPF) $(L4S_LAB_BPF) build/bin/ran-emulator build/bin/meld-loader ## L4S: marking, observer, flowrtt service, DualPI2 through the emulator (root, BPF, namespaces)
	uv run pytest -q l4s/tests

EXPERIMENT_TARGETS += experiment-l4s
.PHONY: experiment-l4s
experiment-l4s: python $(L4S_BPF) $(L4S_LAB_BPF) build/bin/ran-emulator build/bin/meld-loader ## research 001 Table 7.1 (spin/delay RTT vs TCP_INFO, Prague + CUBIC through DualPI2), 5 x 60 s -> docs/results/l4s/
	nice -n 10 uv run python -m mts_lab.l4s.experiment --out docs/results/l4s $(L4S_ARGS)

EXPERIMENT_TARGETS += experiment-l4s-tables8
.PHONY: experiment-l4s-tables8
experiment-l4s-tables8: python $(L4S_BPF) $(L4S_LAB_BPF) build/bin/ran-emulator build/bin/meld-loader ## research 001 Tables 8.1-8.5 (throughput, RTT, retransmissions of Prague + CUBIC through DualPI2 vs reordering, base RTT, jitter, MSS), 5 x 40 s per scenario -> docs/results/l4s/
	nice -n 10 uv run python -m mts_lab.l4s.tables8 --out docs/results/l4s $(L4S_ARGS)

BENCH_TARGETS += bench-l4s
.PHONY: bench-l4s
bench-l4s: python $(L4S_BPF) ## the observer's cost per packet on one core (BPF_PROG_TEST_RUN); the marker's cost to a veth iperf3 flow (interleaved rounds, medians) -> docs/results/l4s/
	nice -n 10 uv run python -m mts_lab.l4s.bench --out docs/results/l4s
