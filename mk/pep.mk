# pep: the split-TCP PEP (Python mec_pep), its C clients, benchmark and experiment.
APT_PACKAGES += gcc libc6-dev haproxy iperf3 clang libbpf-dev liburing-dev strace linux-perf
BUILD_TARGETS += build/lib/libpep_preload.so build/lib/libmec_pep_core.so build/bin/tcpload build/bin/relay-floor \
	build/bpf/relay_floor.bpf.o build/bin/relay-floor-uring build/bin/uring-splice-check
TEST_TARGETS += test-pep
BENCH_TARGETS += bench-pep
EXPERIMENT_TARGETS += experiment-pep-split experiment-pep-interactive experiment-pep-fairness experiment-pep-mmwave

PEP_PRELOAD := build/lib/libpep_preload.so

# LD_PRELOAD shim: unmodified programs (iperf3) through the TLV or SOCKS5 modes.
$(PEP_PRELOAD): pep/clients/c/pep_preload.c pep/clients/c/pep_tlv.h
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl -lpthread

# The compiled relay core (PEP_RELAY_CORE=uring), loaded by mec_pep/core.py.
build/lib/libmec_pep_core.so: pep/core/pep_core.c pep/core/pep_handshake.c pep/core/pep_core.h
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $(filter %.c,$^) -lpthread -luring

# The benchmark's traffic (server, short-flow/connection-rate client, idle holder).
build/bin/tcpload: testbed/tcpload/main.go go.mod
	@mkdir -p $(@D)
	go build -trimpath -o $@ ./testbed/tcpload

# The lower bound of a compiled relay core and its kernel-side variants (measurement
# devices, not the PEP; docs/pep.md "Per-connection cost").
build/bin/relay-floor: testbed/relay-floor/relay_floor.c testbed/relay-floor/floor_common.h
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -o $@ $< -lpthread -lbpf

build/bin/relay-floor-uring: testbed/relay-floor/relay_floor_uring.c testbed/relay-floor/floor_common.h
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -o $@ $< -lpthread -luring

# Does io_uring's splice move TCP bytes, and where does the kernel run it (the core's
# choice of splice(2) for its bulk path; pep/tests/test_core.py runs it).
build/bin/uring-splice-check: testbed/relay-floor/uring_splice_check.c
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -o $@ $< -lpthread -luring

build/bpf/relay_floor.bpf.o: testbed/relay-floor/relay_floor.bpf.c $(MELD_VMLINUX)
	clang -target bpf -g -O2 -Wall -Werror -I$(dir $(MELD_VMLINUX)) -c $< -o $@.tmp
	@mv $@.tmp $@

.PHONY: test-pep bench-pep experiment-pep-split experiment-pep-interactive experiment-pep-fairness experiment-pep-mmwave
test-pep: python rabbitmq $(PEP_PRELOAD) build/lib/libmec_pep_core.so build/bin/uring-splice-check build/bin/ran-emulator build/bin/tcpload ## PEP tests in network namespaces (root)
	@test -z "$$(gofmt -l testbed/tcpload)" || { gofmt -l testbed/tcpload; exit 1; }
	go vet ./testbed/tcpload
	uv run pytest -q pep/tests

bench-pep: python $(PEP_PRELOAD) build/lib/libmec_pep_core.so build/bin/tcpload ## PEP vs direct vs HAProxy: throughput, CPU/Gbit, conn/s, short flows, 100,000 idle connections -> docs/results/pep/
	uv run python -m mts_lab.pep.bench --out docs/results/pep

experiment-pep-split: python build ## split-TCP benefit on the emulated RAN, E2E vs PEP, capacity step -> docs/results/pep-split/
	uv run python -m mts_lab.pep.experiment --out docs/results/pep-split

experiment-pep-interactive: python build ## research 000 Table 5.2: interactive delay beside the step test's 32 MB download, E2E vs PEP, 5 runs -> docs/results/pep-interactive/
	uv run python -m mts_lab.pep.experiment --size-mb 32 --runs 5 --out docs/results/pep-interactive

experiment-pep-fairness: python build ## research 000 Table 5.11/5.12: 10 parallel flows, Jain's index, ping; E2E BFIFO / E2E FQ-CoDel / PEP, fixed 70 Mbit/s (not the mobility trace), 5 runs -> docs/results/pep-fairness/
	uv run python -m mts_lab.pep.fairness --out docs/results/pep-fairness

experiment-pep-mmwave: python build ## research 000 §3.3-3.4 at 1/40: the mmWave mobility trace replayed by the emulator, E2E FQ-CoDel / E2E BFIFO / PEP, then the PEP's socket-buffer sweep, 5 x 30 s runs each -> docs/results/pep-mmwave/
	uv run python -m mts_lab.pep.mmwave arms --out docs/results/pep-mmwave
	uv run python -m mts_lab.pep.mmwave sweep --out docs/results/pep-mmwave
