# pep: the split-TCP PEP (Python mec_pep), its C clients and its benchmark.
APT_PACKAGES += gcc libc6-dev haproxy iperf3
BUILD_TARGETS += build/lib/libpep_preload.so
TEST_TARGETS += test-pep
BENCH_TARGETS += bench-pep

PEP_PRELOAD := build/lib/libpep_preload.so

# LD_PRELOAD shim: unmodified programs (iperf3) through the TLV or SOCKS5 modes.
$(PEP_PRELOAD): pep/clients/c/pep_preload.c pep/clients/c/pep_tlv.h
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl -lpthread

.PHONY: test-pep bench-pep
test-pep: python rabbitmq $(PEP_PRELOAD) ## PEP tests in network namespaces (root)
	uv run pytest -q pep/tests

bench-pep: python $(PEP_PRELOAD) ## PEP vs direct vs HAProxy: throughput, conn/s, memory, CPU
	uv run python -m mec_pep.bench --out docs/results/pep
